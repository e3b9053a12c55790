"""Smoke test of evals/bench_attention.py: the cache-attention op timed per kernel level in
subprocesses, reported as JSON with the kernel paths each level used; bad arguments refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ember.runtime

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "evals" / "bench_attention.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_bench_attention_reports_each_level() -> None:
    best = ember.runtime.cpu_info()["best_isa"]
    best = "avx512vnni" if best == "amx" else best  # the attention kernels' top level (amx adds none)
    levels = sorted({"portable", best})
    proc = _run("--levels", ",".join(levels), "--rounds", "2", "--passes", "1", "--position", "300", "--context",
                "512", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert result["kv_dtype"] == "int8" and result["position"] == 300
    assert set(result["levels"]) == set(levels)
    for level, figures in result["levels"].items():
        assert figures["cold_us"] > 0 and figures["hot_us"] > 0 and len(figures["cold_runs"]) == 2
        assert figures["kernels"]["f32.i8_scores"] == level  # each process ran the level it was given
    assert result["levels"]["portable"]["kernels"]["f32.i8_weighted_rows"] == "portable"


def test_bench_attention_refuses_bad_arguments() -> None:
    proc = _run("--position", "4096")
    assert proc.returncode == 2 and "--position 4096 must lie in [0, --context 2048)" in proc.stderr
    proc = _run("--heads", "8", "--kv-heads", "3")
    assert proc.returncode == 2 and "--heads 8 must be a multiple of --kv-heads 3" in proc.stderr
    proc = _run("--levels", "sse9")
    assert proc.returncode == 2 and "level 'sse9' is not one this CPU runs" in proc.stderr
