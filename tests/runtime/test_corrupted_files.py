"""Corrupted files must give a clean ember error: never a crash, hang or out-of-bounds read.

Each corrupted variant is loaded and run (zero inputs) by the C++ tool `ember_run_file`, which prints
one line per file; a signal, a sanitizer report or a missing line fails the test. The same corpus is
also run under AddressSanitizer + UBSan (a separate CMake build, marked slow).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests.runtime.conftest import ASAN_ENV
from tests.runtime.corrupt import corpus


def _run_tool(tool: Path, files: list[Path], env: dict[str, str] | None = None, copy: bool = False,
              nan: bool = False) -> list[str]:
    flags = ["--copy"] if copy else []  # load into huge-page memory instead of mapping the file
    flags += ["--nan"] if nan else []   # NaN-filled float inputs instead of zeros
    proc = subprocess.run([str(tool), *flags, *map(str, files)], capture_output=True, text=True, errors="replace", timeout=600,
                          env={**os.environ, **(env or {})})
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == len(files) and "ERROR: AddressSanitizer" not in proc.stderr \
        and "runtime error:" not in proc.stderr, (
        f"ember_run_file exited {proc.returncode} after {len(lines)}/{len(files)} files; stderr:\n{proc.stderr[-3000:]}")
    return lines


def _check_corpus(tool: Path, data: bytes, tmp_path: Path, env: dict[str, str] | None = None) -> dict[str, int]:
    items = corpus(data)
    assert len(items) >= 1000
    files = []
    for i, (_, blob) in enumerate(items):
        f = tmp_path / f"c{i:05d}.ember"
        f.write_bytes(blob)
        files.append(f)
    lines = []
    for batch, start in enumerate(range(0, len(files), 200)):
        lines += _run_tool(tool, files[start:start + 200], env, copy=batch % 2 == 1)  # both load modes
    outcome: dict[str, int] = {}
    for (kind, _), line in zip(items, lines):
        assert line == "ok" or line.startswith("error: ["), line
        key = f"{kind}:{'ok' if line == 'ok' else 'error'}"
        outcome[key] = outcome.get(key, 0) + 1
    # Most corruptions must be detected; a flip inside weights legitimately still runs.
    assert sum(v for k, v in outcome.items() if k.endswith(":error")) > len(items) // 2, outcome
    return outcome


def _installed_tool() -> Path:
    from ember.runtime import _C

    tool = Path(_C.__file__).parent / "bin" / "ember_run_file"
    assert tool.exists(), f"{tool} missing: the package build installs it"
    return tool


def test_valid_program_runs(program_bytes: bytes, tmp_path: Path) -> None:
    f = tmp_path / "ok.ember"
    f.write_bytes(program_bytes)
    assert _run_tool(_installed_tool(), [f]) == ["ok"]


def test_corrupted_files_give_clean_errors(program_bytes: bytes, tmp_path: Path) -> None:
    _check_corpus(_installed_tool(), program_bytes, tmp_path)


def test_python_load_of_corrupted_bytes_raises_ember_errors(program_bytes: bytes) -> None:
    import ember.runtime
    from ember.runtime.errors import EmberError

    errors = 0
    for kind, blob in corpus(program_bytes, seed=1)[::12]:
        try:
            prog = ember.runtime.load(blob)
            prog.run("forward", torch.zeros(1, 1, 16))
        except EmberError:
            errors += 1
    assert errors > 0


@pytest.mark.slow
def test_corrupted_files_under_address_sanitizer(asan_tool: Path, program_bytes: bytes, tmp_path: Path) -> None:
    env = ASAN_ENV
    f = tmp_path / "ok.ember"
    f.write_bytes(program_bytes)
    assert _run_tool(asan_tool, [f], env) == ["ok"]
    assert _run_tool(asan_tool, [f], env, nan=True) == ["ok"]  # NaN through exp_approx: no UBSan shift report
    _check_corpus(asan_tool, program_bytes, tmp_path, env)
