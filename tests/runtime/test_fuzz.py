"""The structure-aware fuzzer (tests/runtime/fuzz) on a small program and on a tiny LLM file.

Each mutant runs in a forked child with an address-space limit (python -m tests.runtime.fuzz,
a parent that imports ember but never torch); none may crash, hang, raise a non-ember
exception or fail an allocation that ember's memory limit should have refused first. The same
mutants then run under AddressSanitizer + UBSan (ember_run_file --patched).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.conftest import ASAN_ENV, REPO
from tests.runtime.fuzz.fieldmap import field_map
from tests.runtime.fuzz.mutate import Mutator, with_all_fields

COUNT = 10_000


def _fuzz(seed: Path, *flags: str, count: int = COUNT) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tests.runtime.fuzz", str(seed), "--count", str(count), *flags],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and not report["failures"], (report, proc.stderr[-3000:])
    assert sum(report["counts"].values()) == count, report
    return report


def _llm_seed(tmp_path: Path, quant: str | None = None) -> Path:
    from tests.runners.tiny_llm import tiny_llm_path

    return tiny_llm_path(quant=quant)


def test_field_map_covers_the_schema(program_bytes: bytes) -> None:
    fields = field_map(program_bytes)
    paths = {re.sub(r"\[\d+\]", "", f.path) for f in fields}
    for want in ("header.fb_size", "program.methods.arena_size", "program.segments.offset",
                 "program.methods.values.v.Tensor.storage", "program.methods.values.v.Tensor.sizes",
                 "program.methods.instructions.i.KernelCall.args", "program.methods.instructions.i_type",
                 "program.methods.delegates.segment", "program.state.sizes", "program.metadata.value.MetaBytes.segment"):
        assert want in paths, want
    assert {f.kind for f in fields} == {"scalar", "union_type", "vector_length", "element", "offset", "table_element"}
    # The field map points at the bytes it names: every Tensor.storage byte is a valid Storage.
    full = with_all_fields(program_bytes)
    storage = [full[f.pos] for f in field_map(full) if f.path.endswith("Tensor.storage")]
    assert set(storage) == {0, 1, 2, 3, 4}  # with defaults written, Arena (0) tensors have the field too
    # Mutants are reproducible from their index and differ from the seed.
    a, b = Mutator(program_bytes).mutant(7), Mutator(program_bytes).mutant(7)
    assert a.apply(program_bytes) == b.apply(program_bytes)
    assert sum(Mutator(program_bytes).mutant(i).apply(program_bytes) != program_bytes for i in range(50)) >= 45


def test_fuzz_smoke(program_bytes: bytes, tmp_path: Path) -> None:
    seed = tmp_path / "block.ember"
    seed.write_bytes(program_bytes)
    report = _fuzz(seed, "--salt", "3", count=300)
    assert report["counts"].get("ember error", 0) > 0 and report["counts"].get("ok", 0) > 0


def test_a_crash_or_hang_is_pinned_on_its_mutant(program_bytes: bytes, monkeypatch) -> None:
    """Children run batches of mutants: a child that dies (signal, alarm) is charged to the first
    mutant of its batch without an outcome, and a new child goes on after it."""
    import faulthandler
    import signal
    import time

    from tests.runtime.fuzz import harness

    seed = with_all_fields(program_bytes)
    mutator = Mutator(seed)
    crash, hang = {mutator.mutant(i).apply(seed) for i in (5, 21, 31)}, mutator.mutant(9).apply(seed)
    assert hang not in crash

    def run_one(data: bytes, llm: bool, scratch: str, api: bool) -> int:
        if data in crash:
            faulthandler.disable()  # pytest's, inherited: no traceback dump from the child
            os.kill(os.getpid(), signal.SIGSEGV)
        if data == hang:
            time.sleep(30)
        return harness.OK

    monkeypatch.setattr(harness, "_run_one", run_one)
    report = harness.fuzz(program_bytes, 40, timeout=1, batch=16, jobs=2)
    assert sum(report.counts.values()) == 40 and report.counts["ok"] == 36
    assert sorted((i, outcome) for i, outcome, _ in report.failures) == [
        (5, "signal SIGSEGV"), (9, "hang (alarm)"), (21, "signal SIGSEGV"), (31, "signal SIGSEGV")]
    with pytest.raises(ValueError, match="batch must be in"):
        harness.fuzz(program_bytes, 1, batch=0)


@pytest.mark.slow
def test_fuzz_small_program(program_bytes: bytes, tmp_path: Path) -> None:
    seed = tmp_path / "block.ember"
    seed.write_bytes(program_bytes)
    _fuzz(seed)


@pytest.mark.slow
def test_fuzz_tiny_llm(tmp_path: Path) -> None:
    _fuzz(_llm_seed(tmp_path), "--llm")


@pytest.mark.slow
def test_fuzz_tiny_llm_through_the_python_api(tmp_path: Path) -> None:
    """ember.load, generate and chat: the tokenizer, chat template and generation defaults that
    Python reads from the file, on top of the runner."""
    _fuzz(_llm_seed(tmp_path), "--api")


@pytest.mark.slow
def test_fuzz_tiny_quantized_llm(tmp_path: Path) -> None:
    """8da4w: the linears and the tied table run on the CPU delegate, whose packed blobs the
    mutants cut, flip and resize."""
    _fuzz(_llm_seed(tmp_path, "8da4w"), "--llm")


def _asan_patched(tool: Path, seed: Path, tmp_path: Path, count: int) -> None:
    patches = tmp_path / f"{seed.stem}.patches"
    subprocess.run([sys.executable, "-m", "tests.runtime.fuzz", str(seed), "--count", str(count), "--patches",
                    str(patches)], check=True, cwd=REPO, timeout=300)
    proc = subprocess.run([str(tool), "--memory-limit", "256M", "--patched", f"{patches}.seed", str(patches)],
                          capture_output=True, text=True, errors="replace", timeout=900,
                          env={**os.environ, **ASAN_ENV})
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == count and "ERROR: AddressSanitizer" not in proc.stderr \
        and "runtime error:" not in proc.stderr, (
        f"exited {proc.returncode} after {len(lines)}/{count} mutants; stderr:\n{proc.stderr[-3000:]}")
    assert all(line == "ok" or line.startswith("error: [") for line in lines)


@pytest.mark.slow
def test_fuzz_corpus_under_address_sanitizer(asan_tool: Path, program_bytes: bytes, tmp_path: Path) -> None:
    seed = tmp_path / "block.ember"
    seed.write_bytes(program_bytes)
    _asan_patched(asan_tool, seed, tmp_path, COUNT)
    _asan_patched(asan_tool, _llm_seed(tmp_path), tmp_path, COUNT)
    _asan_patched(asan_tool, _llm_seed(tmp_path, "8da4w"), tmp_path, COUNT)
