"""The Program file: save/load round trip, metadata, dedup, alignment, inspect."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ember.runtime
from ember.export import Program, lower
from ember.export import format as fmt
from tests.helpers import export


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = torch.randn(64, 64)
        self.a = torch.nn.Parameter(w.clone())
        self.b = torch.nn.Parameter(w.clone())  # same bytes: stored once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.a + x @ self.b


METADATA = {"llm.bos_id": 1, "llm.eos_ids": [2, 3], "x.ratio": 0.5, "x.flag": True, "x.name": "tied",
            "tokenizer.data": b"\x00\x01binary"}


def test_round_trip_and_metadata(tmp_path: Path) -> None:
    torch.manual_seed(0)
    program = lower(export(Tied(), (torch.randn(2, 64),)), metadata=METADATA)
    path = tmp_path / "t.ember"
    n = program.save(path)
    assert path.stat().st_size == n
    loaded = Program.load(path)
    assert loaded.methods == ["forward"]
    md = loaded.metadata
    for k, v in METADATA.items():
        assert md[k] == v, k
    rt = ember.runtime.load(path)
    assert {k: rt.metadata[k] for k in METADATA} == METADATA
    # header and alignment
    raw = path.read_bytes()
    magic, major, minor, fbo, fbs, do, ds = struct.unpack_from("<8sIIQQQQ", raw, 0)
    assert magic == fmt.MAGIC and major == fmt.FORMAT_MAJOR and do % 4096 == 0 and do + ds == len(raw)
    for seg in loaded.root.segments:
        assert seg.offset % 64 == 0
    # the two identical weights share one segment
    weights = [s for s in loaded.root.segments if s.size == 64 * 64 * 4]
    assert len(weights) == 1
    # runs, from bytes too
    x = torch.randn(2, 64)
    out_file = rt.run("forward", x)[0]
    out_bytes = ember.runtime.load(path.read_bytes()).run("forward", x)[0]
    np.testing.assert_array_equal(out_file, out_bytes)
    copied = ember.runtime.load(path, mmap=False)  # read into huge-page memory instead of mapped
    assert {k: copied.metadata[k] for k in METADATA} == METADATA
    np.testing.assert_array_equal(copied.run("forward", x)[0], out_file)
    path.write_bytes(raw[: len(raw) // 2])  # truncated: a clean error in both modes
    for mmap in (True, False):
        with pytest.raises(ember.runtime.InvalidProgramError):
            ember.runtime.load(path, mmap=mmap)


def test_summary_reports_arena_against_activations() -> None:
    program = lower(export(Tied(), (torch.randn(2, 64),)))
    text = program.summary()
    assert "arena" in text and "activations" in text and "forward" in text


def test_inspect_cli(tmp_path: Path) -> None:
    program = lower(export(Tied(), (torch.randn(2, 64),)), metadata=METADATA)
    path = tmp_path / "t.ember"
    program.save(path)
    out = subprocess.run([sys.executable, "-m", "ember", "inspect", str(path)], capture_output=True, text=True,
                         check=True).stdout
    assert "format 1.0" in out and "method forward" in out and "arena" in out and "llm.eos_ids = [2, 3]" in out
    js = json.loads(subprocess.run([sys.executable, "-m", "ember", "inspect", str(path), "--json"],
                                   capture_output=True, text=True, check=True).stdout)
    assert js["methods"]["forward"]["inputs"] == ["float32[2, 64]"]
    bad = tmp_path / "bad.ember"
    bad.write_bytes(b"nope" * 40)
    proc = subprocess.run([sys.executable, "-m", "ember", "inspect", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and "not an .ember" in proc.stderr
