"""Runs mutants in forked children, each under an address-space limit and an alarm.

The parent imports ember (and numpy) once and never runs a kernel, so it has no worker
threads to lose across fork(); each child applies one mutant, loads it, runs every method on
zero inputs (and, for an LLM file, the text runner for two tokens) and exits with a code that
says how it ended. A signal (SIGSEGV, SIGABRT from std::terminate, SIGALRM for a hang), an
exception that is not an ember error, or an allocation that failed against the address-space
limit (instead of being refused by ember's memory limit first) is a failure.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from tests.runtime.fuzz.mutate import Mutant, Mutator, with_all_fields

OK, CLEAN_ERROR, FOREIGN_ERROR, ALLOCATION_FAILED = 0, 10, 11, 12
OUTCOMES = {OK: "ok", CLEAN_ERROR: "ember error", FOREIGN_ERROR: "non-ember exception",
            ALLOCATION_FAILED: "allocation over the address-space limit"}


@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[tuple[int, str, list[str]]] = field(default_factory=list)  # (index, outcome, ops)
    seconds: float = 0.0

    def add(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1


def _address_space_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _run_program(data: bytes) -> None:
    import numpy as np

    import ember.runtime

    prog = ember.runtime.load(data)
    for name in prog.methods:
        info = prog.method_info(name)
        inputs = []
        for spec in info["inputs"]:
            shape = [1 if dyn and s > 0 else s for s, dyn in zip(spec["sizes"], spec["dynamic"])]
            dtype = "uint16" if spec["dtype"] == "bfloat16" else spec["dtype"]
            if int(np.prod(shape, dtype=np.int64)) > (1 << 24):
                return  # an input larger than the caller would make; the loader accepted its spec
            inputs.append(np.zeros(shape, dtype=dtype))
        prog.run(name, *inputs)


def _run_llm(data: bytes, scratch: str) -> None:
    from ember.runners import _runner

    path = os.path.join(scratch, f"m{os.getpid()}.ember")
    with open(path, "wb") as f:
        f.write(data)
    try:
        runner = _runner.Runner(path, 0, True)
        config = _runner.GenerateConfig()
        config.max_new_tokens = 2
        runner.generate([max(runner.bos_id, 0)], config)
    finally:
        os.unlink(path)


def _child(data: bytes, llm: bool, scratch: str, address_space: int, memory_limit: int, timeout: int) -> int:
    import ember.runtime
    from ember.runtime.errors import EmberError, OutOfMemoryError

    signal.alarm(timeout)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space_now() + address_space, hard))
    ember.runtime.set_memory_limit(memory_limit)
    ember.runtime.set_num_threads(1)
    try:
        if llm:
            try:
                _run_llm(data, scratch)  # the runner drives the method itself: no second run
                return OK
            except EmberError:
                pass  # e.g. broken LLM metadata: still run the methods below
        _run_program(data)
    except OutOfMemoryError as e:
        # Refused before allocating (memory limit, planned capacity) is clean; "cannot allocate"
        # means the operating system refused: ember let a file size an allocation unchecked.
        if "cannot allocate" not in str(e):
            return CLEAN_ERROR
        print(f"allocation failed: {e!r}", file=sys.stderr)
        return ALLOCATION_FAILED
    except EmberError:
        return CLEAN_ERROR
    except MemoryError as e:
        print(f"allocation failed: {e!r}", file=sys.stderr)
        return ALLOCATION_FAILED
    except BaseException as e:  # noqa: BLE001 - any other exception from the bindings is a finding
        print(f"non-ember exception: {e!r}", file=sys.stderr)
        return FOREIGN_ERROR
    return OK


def fuzz(seed: bytes, count: int, *, llm: bool = False, salt: int = 0, jobs: int | None = None,
         address_space: int = 1 << 30, memory_limit: int = 256 << 20, timeout: int = 20,
         on_failure: Callable[[int, Mutant, str], None] | None = None) -> Report:
    """Runs mutants 0..count-1 of `seed`, `jobs` children at a time; returns what happened.

    Each child may grow its address space by `address_space` bytes, and runs with ember's memory
    limit at `memory_limit` (below it), so every file-sized allocation must be refused by ember
    before the operating system refuses it.
    """
    # Imported once here and inherited by every child (which would otherwise import numpy anew
    # for each mutant); OpenBLAS with no threads of its own, so that none are lost across fork().
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy  # noqa: F401

    import ember.runtime  # noqa: F401
    from ember.runners import _runner  # noqa: F401

    seed = with_all_fields(seed)
    mutator = Mutator(seed, salt)
    jobs = jobs or max(1, len(os.sched_getaffinity(0)))
    report = Report()
    running: dict[int, tuple[int, Mutant]] = {}
    start = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="ember-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)

    def reap(block: bool) -> None:
        pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        if pid == 0:
            return
        index, mutant = running.pop(pid)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            outcome = "hang (alarm)" if sig == signal.SIGALRM else f"signal {signal.Signals(sig).name}"
        else:
            outcome = OUTCOMES.get(os.WEXITSTATUS(status), f"exit {os.WEXITSTATUS(status)}")
        report.add(outcome)
        if outcome not in ("ok", "ember error"):
            report.failures.append((index, outcome, mutant.ops))
            if on_failure is not None:
                on_failure(index, mutant, outcome)

    try:
        for index in range(count):
            while len(running) >= jobs:
                reap(True)
            mutant = mutator.mutant(index)
            data = mutant.apply(seed)
            pid = os.fork()
            if pid == 0:
                code = FOREIGN_ERROR
                try:
                    code = _child(data, llm, scratch, address_space, memory_limit, timeout)
                finally:
                    os._exit(code)
            running[pid] = (index, mutant)
        while running:
            reap(True)
    finally:
        for pid in list(running):
            os.kill(pid, signal.SIGKILL)
        os.rmdir(scratch) if not os.listdir(scratch) else None
    report.seconds = time.monotonic() - start
    return report


def write_corpus(seed: bytes, count: int, path: str, salt: int = 0) -> None:
    """The mutants `fuzz` runs, as one patch file `path` for `ember_run_file --patched SEED PATCHES`
    (e.g. under ASan), and the seed they patch (`with_all_fields(seed)`) as `path + ".seed"`."""
    import struct

    seed = with_all_fields(seed)
    with open(path + ".seed", "wb") as f:
        f.write(seed)
    mutator = Mutator(seed, salt)
    with open(path, "wb") as f:
        f.write(b"EMBP" + struct.pack("<I", count))
        for index in range(count):
            f.write(mutator.mutant(index).encode())
