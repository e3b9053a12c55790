"""Threads: concurrent Program.run never deadlocks, the pool is capped at the CPUs, and a failed
worker start is one clean error. Deadlock-prone cases run in a child process with a timeout."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import ember.runtime
from ember.export import lower
from tests.helpers import export

REPO = Path(__file__).resolve().parents[2]


class MatMul(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ x.transpose(0, 1), dim=-1).sum(dim=0)


def _run_child(script: str, tmp_path: Path, data: bytes, timeout: float = 120) -> str:
    f = tmp_path / "p.ember"
    f.write_bytes(data)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(f)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_two_threads_run_one_program_without_deadlock(tmp_path: Path) -> None:
    data = lower({"a": export(MatMul(), (torch.randn(64, 32),)), "b": export(MatMul(), (torch.randn(64, 32),))}).to_bytes()
    # Once: a runtime mutex taken while holding the GIL deadlocked the process, both on the
    # first run of two methods and on two runs of one.
    out = _run_child("""
        import sys, threading
        import numpy as np
        import ember.runtime
        prog = ember.runtime.load(sys.argv[1])
        x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
        want = prog.run("a", x)[0]
        prog = ember.runtime.load(sys.argv[1])   # fresh: the first runs load the methods
        errors = []
        def work(method):
            try:
                for _ in range(200):
                    np.testing.assert_allclose(prog.run(method, x)[0], want, rtol=1e-5)
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=work, args=(m,)) for m in ("a", "b", "a", "b")]
        for t in threads: t.start()
        for t in threads: t.join()
        print("errors", len(errors), errors[:1])
    """, tmp_path, data)
    assert out.strip() == "errors 0 []"


def test_thread_count_is_capped_with_a_warning() -> None:
    before = ember.runtime.get_num_threads()
    cap = ember.runtime.max_num_threads()
    try:
        with pytest.warns(RuntimeWarning, match=f"threads=1000 is more than the {cap} logical CPUs"):
            assert ember.runtime.set_num_threads(1000) == cap
        assert ember.runtime.get_num_threads() == cap
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ember.runtime.set_num_threads(1) == 1
    finally:
        ember.runtime.set_num_threads(before)


def test_failed_thread_start_is_one_clean_error(tmp_path: Path) -> None:
    if ember.runtime.max_num_threads() < 2:
        pytest.skip("needs two CPUs to start a worker")
    data = lower(export(MatMul(), (torch.randn(256, 256),))).to_bytes()
    # An address-space limit just above what the process uses: no 8 MiB thread stack fits.
    out = _run_child("""
        import resource, sys
        import numpy as np
        import ember.runtime
        prog = ember.runtime.load(sys.argv[1])   # mapped: no worker thread has started yet
        x = np.ones((256, 256), np.float32)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + (2 << 20), hard))
        try:
            ember.runtime.set_num_threads(2)
            print("no error")
        except ember.runtime.OutOfMemoryError as e:
            print("error:", e)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        print("threads", ember.runtime.get_num_threads())
        for _ in range(3):
            prog.run("forward", x)   # runs on the threads it has, no error on every call
        print("runs ok")
    """, tmp_path, data)
    lines = out.strip().splitlines()
    assert lines[0].startswith("error: cannot start kernel worker thread 1 of 2"), out
    assert lines[1:] == ["threads 1", "runs ok"], out


def test_set_num_threads_returns_the_count_in_effect() -> None:
    before = ember.runtime.get_num_threads()
    try:
        assert ember.runtime.set_num_threads(1) == 1 == ember.runtime.get_num_threads()
        prog = ember.runtime.load(lower(export(MatMul(), (torch.randn(8, 4),))).to_bytes())
        assert prog.run("forward", np.ones((8, 4), np.float32))[0].shape == (8,)
    finally:
        ember.runtime.set_num_threads(before)



def test_core_round_trip_is_measured_between_two_cpus_and_refuses_bad_ones() -> None:
    import os

    import ember.runtime as rt

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        with pytest.raises(rt.InvalidArgumentError, match="needs two CPUs"):
            rt.core_round_trip_ns()
        return
    ns = rt.core_round_trip_ns(trips=2000)
    assert 1 < ns < 1e6  # a line's round trip: tens to thousands of ns, never zero
    assert rt.core_round_trip_ns(cpus[1], cpus[0], trips=100) > 0
    assert rt.core_round_trip_ns(trips=10_000_000) > 0  # each batch stops after ~30 ms instead
    before = os.sched_getaffinity(0)
    with pytest.raises(rt.InvalidArgumentError, match="must differ"):
        rt.core_round_trip_ns(cpus[0], cpus[0])
    with pytest.raises(rt.InvalidArgumentError, match="may run on"):
        rt.core_round_trip_ns(cpus[0], 1023)
    with pytest.raises(rt.InvalidArgumentError, match=r"\[0, 1024\)"):
        rt.core_round_trip_ns(-1, cpus[0])
    with pytest.raises(rt.InvalidArgumentError, match="trips"):
        rt.core_round_trip_ns(trips=0)
    with pytest.raises(rt.InvalidArgumentError, match="CPU number"):
        rt.core_round_trip_ns("0", cpus[1])
    assert os.sched_getaffinity(0) == before  # the calling thread's CPUs are given back
