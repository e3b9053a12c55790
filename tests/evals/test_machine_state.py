"""evals/machine_state.py as a script: prints the 90 MiB read, or waits for a rate and then runs a
command in its place (exit 1 when the wait times out; a command without --wait-for is refused)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "evals" / "machine_state.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_prints_the_read() -> None:
    r = _run("--threads", "1")
    assert r.returncode == 0, r.stderr
    trip = "one CPU" if len(os.sched_getaffinity(0)) < 2 else r"a line's round trip between two CPUs \d+ ns"
    assert re.fullmatch(r"\d\d:\d\d:\d\d a 90 MiB read by 1 thread: \d+\.\d GB/s; " + trip + "\n", r.stdout), r.stdout


def test_runs_the_command_once_the_rate_is_reached() -> None:
    r = _run("--wait-for", "0", "--", sys.executable, "-c", "print('benchmark ran')")
    assert r.returncode == 0 and r.stdout.endswith("benchmark ran\n"), (r.stdout, r.stderr)


def test_gives_up_after_the_timeout() -> None:
    r = _run("--wait-for", "1e9", "--every", "1", "--timeout", "0", "--", sys.executable, "-c", "print('ran')")
    assert r.returncode == 1 and "ran" not in r.stdout
    assert "stayed under 1e+09 GB/s for 0 s" in r.stderr


def test_a_command_needs_a_rate() -> None:
    r = _run("--", "echo", "x")
    assert r.returncode == 2 and "COMMAND needs --wait-for GBS" in r.stderr


def test_distance_classifies_a_runs_round_trips() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from machine_state import FAR_NS, NEAR_NS, distance

    assert distance([85.0, 140.0, 70.0]) == "near"
    assert distance([380.0, 412.0]) == "far"
    assert distance([90.0, 390.0]) == "mixed"  # the vCPUs moved during the run
    assert distance([250.0]) == "mixed"  # neither: not counted as either
    assert distance([NEAR_NS - 1]) == "near" and distance([FAR_NS + 1]) == "far"
    assert distance([]) == distance([80.0, None]) == "unknown"  # one CPU: nothing measured
