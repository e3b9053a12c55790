"""Runs mutants in forked children, each under an address-space limit and an alarm per mutant.

The parent imports ember (and numpy) once and never runs a kernel, so it has no worker
threads to lose across fork(). Each child runs a batch of mutants in turn: it applies one,
loads it, runs every method on zero inputs (and, for an LLM file, the text runner for two
tokens), writes (index, outcome) to its pipe and takes the next. A signal (SIGSEGV, SIGABRT from
std::terminate, SIGALRM for a hang) ends the child: the first mutant of its batch without an
outcome is the one that did it, and a new child goes on after it. An exception that is not an
ember error, or an allocation that failed against the address-space limit (instead of being
refused by ember's memory limit first), is a failure too. A fork per mutant cost ~10x the
mutant's own run (0.3-0.8 ms on the tiny files); batches of 16 keep what one mutant leaves
behind (freed memory, the allocator's state) from reaching far.
"""

from __future__ import annotations

import os
import resource
import select
import signal
import struct
import sys
import tempfile
import time
from collections import deque
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


def _run_api(data: bytes, scratch: str) -> None:
    import ember

    path = os.path.join(scratch, f"m{os.getpid()}.ember")
    with open(path, "wb") as f:
        f.write(data)
    try:
        llm = ember.load(path, threads=1)
        llm.generate("Once upon a time", max_new_tokens=2)
        llm.chat([{"role": "user", "content": "Hi"}], max_new_tokens=2)
    finally:
        os.unlink(path)


def _setup_child(address_space: int, memory_limit: int) -> None:
    import ember.runtime

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space_now() + address_space, hard))
    ember.runtime.set_memory_limit(memory_limit)
    ember.runtime.set_num_threads(1)


def _run_one(data: bytes, llm: bool, scratch: str, api: bool = False) -> int:
    """One mutant's run in a child: its outcome code. `api`: through ember.load, generate and chat
    (the Python layer: the tokenizer, the chat template, the generation defaults) instead."""
    from ember.runtime.errors import EmberError, OutOfMemoryError

    clean: tuple[type[BaseException], ...] = (EmberError,)
    if api:  # the API's documented error for a chat template that does not parse, too
        from ember.llm.chat_template import ChatTemplateError

        clean = (EmberError, ChatTemplateError)
    try:
        if api:
            _run_api(data, scratch)
            return OK
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
    except clean:
        return CLEAN_ERROR
    except MemoryError as e:
        print(f"allocation failed: {e!r}", file=sys.stderr)
        return ALLOCATION_FAILED
    except BaseException as e:  # noqa: BLE001 - any other exception from the bindings is a finding
        print(f"non-ember exception: {e!r}", file=sys.stderr)
        return FOREIGN_ERROR
    return OK


_RECORD = struct.Struct("<qB")  # a child's report of one mutant: index, outcome code


def _child(seed: bytes, mutator: Mutator, batch: list[int], llm: bool, api: bool, scratch: str, timeout: int,
           out: int) -> None:
    for index in batch:
        data = mutator.mutant(index).apply(seed)
        signal.alarm(timeout)
        code = _run_one(data, llm, scratch, api)
        signal.alarm(0)
        os.write(out, _RECORD.pack(index, code))


def _pidfd(pid: int) -> int:
    """A file descriptor that becomes readable when child `pid` exits, or -1 (Linux < 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def fuzz(seed: bytes, count: int, *, llm: bool = False, api: bool = False, salt: int = 0, jobs: int | None = None,
         address_space: int = 1 << 30, memory_limit: int = 256 << 20, timeout: int = 20, batch: int = 16,
         on_failure: Callable[[int, Mutant, str], None] | None = None) -> Report:
    """Runs mutants 0..count-1 of `seed`, `jobs` children at a time, `batch` mutants per child;
    returns what happened. Each mutant's methods run on zero inputs; `llm`: the C++ text runner
    generates two tokens (then the methods run if the file is refused as an LLM); `api`: it goes
    through the Python API instead (ember.load, generate, chat).

    Each child may grow its address space by `address_space` bytes, and runs with ember's memory
    limit at `memory_limit` (below it), so every file-sized allocation must be refused by ember
    before the operating system refuses it. A mutant has `timeout` seconds.
    """
    # Imported once here and inherited by every child (which would otherwise import numpy anew);
    # OpenBLAS with no threads of its own, so that none are lost across fork().
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy  # noqa: F401

    import ember.runtime  # noqa: F401
    from ember.runners import _runner  # noqa: F401

    if api:
        import ember.llm.api  # noqa: F401
        import ember.llm.chat_template  # noqa: F401
        import ember.llm.tokenizer  # noqa: F401

    if not 1 <= batch <= 4096:  # a batch's reports (9 bytes each) must fit the pipe's buffer
        raise ValueError(f"batch must be in [1, 4096], got {batch}")
    seed = with_all_fields(seed)
    mutator = Mutator(seed, salt)
    jobs = jobs or max(1, len(os.sched_getaffinity(0)))
    report = Report()
    pending = deque(list(range(i, min(i + batch, count))) for i in range(0, count, batch))
    running: dict[int, tuple[list[int], int, int]] = {}  # pid -> (its batch, its pipe's read end, its pidfd or -1)
    start = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="ember-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)

    def outcome_of(code: int) -> str:
        return OUTCOMES.get(code, f"exit {code}")

    def record(index: int, outcome: str) -> None:
        report.add(outcome)
        if outcome not in ("ok", "ember error"):
            mutant = mutator.mutant(index)
            report.failures.append((index, outcome, mutant.ops))
            if on_failure is not None:
                on_failure(index, mutant, outcome)

    def reap() -> None:
        # Waits for one of this call's children only (a pidfd per child where the OS has them):
        # waitpid(-1) would also reap children its caller started (in a test process, a server's).
        pidfds = {pidfd: pid for pid, (_, _, pidfd) in running.items() if pidfd >= 0}
        pid = -1
        if len(pidfds) == len(running):
            ready, _, _ = select.select(list(pidfds), [], [])
            pid = pidfds[ready[0]]
        pid, status = os.waitpid(pid, 0)
        work, fd, pidfd = running.pop(pid)
        if pidfd >= 0:
            os.close(pidfd)
        data = _read_all(fd)
        done = [_RECORD.unpack_from(data, k) for k in range(0, len(data) - len(data) % _RECORD.size, _RECORD.size)]
        for index, code in done:
            record(index, outcome_of(code))
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            ended = "hang (alarm)" if sig == signal.SIGALRM else f"signal {signal.Signals(sig).name}"
        else:
            ended = outcome_of(os.WEXITSTATUS(status))
        if len(done) < len(work):  # the first mutant without an outcome ended the child
            record(work[len(done)], ended)
            if len(done) + 1 < len(work):
                pending.appendleft(work[len(done) + 1:])
        else:  # every mutant reported, then the child died: the last one's outcome is this
            report.counts[outcome_of(done[-1][1])] -= 1
            record(work[-1], ended)

    try:
        while pending or running:
            while pending and len(running) < jobs:
                work = pending.popleft()
                read_end, write_end = os.pipe()
                pid = os.fork()
                if pid == 0:
                    code = FOREIGN_ERROR
                    try:
                        os.close(read_end)
                        _setup_child(address_space, memory_limit)
                        _child(seed, mutator, work, llm, api, scratch, timeout, write_end)
                        code = OK
                    finally:
                        os._exit(code)
                os.close(write_end)
                running[pid] = (work, read_end, _pidfd(pid))
            reap()
    finally:
        for pid, (_, fd, pidfd) in running.items():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            for f in (fd, pidfd) if pidfd >= 0 else (fd,):
                os.close(f)
        os.rmdir(scratch) if not os.listdir(scratch) else None
    report.counts = {k: v for k, v in report.counts.items() if v}
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
