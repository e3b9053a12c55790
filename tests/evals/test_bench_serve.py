"""Smoke test of evals/bench_serve.py: it starts `ember serve` on a tiny model, drives it with 2
streaming clients and reports its figures (JSON) with no errors, then stops the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runners.tiny_llm import tiny_llm_path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_serve_reports_a_clean_run() -> None:
    requests, max_tokens = 6, 5
    proc = subprocess.run([sys.executable, str(ROOT / "evals" / "bench_serve.py"), str(tiny_llm_path()), "--sessions",
                           "2", "--clients", "2", "--requests", str(requests), "--max-tokens", str(max_tokens),
                           "--threads", "1", "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert result["errors"] == 0 and result["first_errors"] == []
    assert result["requests_per_s"] > 0 and result["wall_s"] > 0
    # every request streamed its usage: decode tok/s counts at most max_tokens per request
    assert 0 < result["decode_tokens_per_s"] * result["wall_s"] <= requests * max_tokens + 1e-6
    assert 0 < result["ttft_p50_ms"] <= result["ttft_p99_ms"]
    assert result["server_cpu_s"] > 0 and result["client_cpu_s"] >= 0
    assert result["read_gbs"] > 0  # the machine's state before the run
    trips = result["core_trip_ns"]  # and how far apart its CPUs were, before and after
    if len(os.sched_getaffinity(0)) >= 2:
        assert trips["start"] > 0 and trips["end"] > 0
    else:
        assert trips == {"start": None, "end": None}
    assert result["machine"]["cpu"] and result["machine"]["isa"]  # and the machine itself
    # the prompts' tokens the server computed (each request's prompt, less a prefix its session held)
    assert isinstance(result["prefill_tokens"], int) and result["prefill_tokens"] > 0 and result["prefill_s"] > 0


def test_bench_serve_interleaves_client_counts_in_rounds() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "evals" / "bench_serve.py"), str(tiny_llm_path()), "--sessions",
                           "2", "--clients", "1,2", "--rounds", "2", "--requests", "4", "--max-tokens", "4",
                           "--threads", "1", "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    # one server, the counts in turn round by round
    assert [(r["round"], r["clients"]) for r in result["runs"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(r["errors"] == 0 and r["decode_tokens_per_s"] > 0 for r in result["runs"])
    by = {(r["round"], r["clients"]): r["decode_tokens_per_s"] for r in result["runs"]}
    two = result["summary"]["2"]
    assert two["ratio_per_round"] == [by[(1, 2)] / by[(1, 1)], by[(2, 2)] / by[(2, 1)]]
    assert two["median_ratio"] == sum(two["ratio_per_round"]) / 2
    assert result["summary"]["1"]["ratio_per_round"] == [1.0, 1.0]
    # and the same rounds grouped by how far apart the CPUs were through each (machine_state.distance)
    by_distance = two["ratio_by_distance"]
    assert set(by_distance) <= {"near", "far", "mixed", "unknown"}
    assert sorted(x for v in by_distance.values() for x in v) == sorted(two["ratio_per_round"])
    if len(os.sched_getaffinity(0)) < 2:
        assert set(by_distance) == {"unknown"}
    # the same ratio for the decode steps alone: mean batch / step time, round by round
    rate = {(r["round"], r["clients"]): r["decode_batch_mean"] / r["decode_step_ms"] for r in result["runs"]}
    assert two["step_ratio_per_round"] == pytest.approx([rate[(1, 2)] / rate[(1, 1)], rate[(2, 2)] / rate[(2, 1)]])
    assert two["median_step_ratio"] == pytest.approx(sum(two["step_ratio_per_round"]) / 2)
    assert result["machine"]["logical_cpus"] >= 1


def test_bench_serve_refuses_bad_client_counts() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "evals" / "bench_serve.py"), str(tiny_llm_path()), "--clients",
                           "1,x"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "client counts separated by commas" in proc.stderr


def test_bench_serve_in_process_drives_the_sessions_without_a_server() -> None:
    requests, max_tokens = 6, 5
    proc = subprocess.run([sys.executable, str(ROOT / "evals" / "bench_serve.py"), str(tiny_llm_path()), "--sessions",
                           "2", "--clients", "1,2", "--requests", str(requests), "--max-tokens", str(max_tokens),
                           "--threads", "1", "--in-process", "--json"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert [r["clients"] for r in result["runs"]] == [1, 2]
    for r in result["runs"]:
        assert r["in_process"] and r["errors"] == 0 and r["requests_per_s"] > 0
        assert 0 < r["decode_tokens_per_s"] * r["wall_s"] <= requests * max_tokens + 1e-6
        assert 0 < r["ttft_p50_ms"] <= r["ttft_p99_ms"] and r["prefill_tokens"] > 0 and r["process_cpu_s"] > 0
    # the same greedy requests generate the same tokens whether one client runs them or two share the steps
    generated = [round(r["decode_tokens_per_s"] * r["wall_s"]) for r in result["runs"]]
    assert generated[0] == generated[1]
    assert result["runs"][0]["decode_batch_mean"] == 1.0 and 1.0 <= result["runs"][1]["decode_batch_mean"] <= 2.0
    assert result["summary"]["2"]["median_ratio"] > 0


def test_bench_serve_in_process_needs_a_session_per_client() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "evals" / "bench_serve.py"), str(tiny_llm_path()), "--sessions",
                           "2", "--clients", "4", "--in-process"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "--clients 4 needs --sessions >= 4, got 2" in proc.stderr
