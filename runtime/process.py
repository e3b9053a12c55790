"""Process-wide settings and facts of the C++ runtime: threads, the memory limit, the CPU and its
kernels, the registered kernels and backends. No numpy: ember.load and the CLI use these without
loading it."""

from __future__ import annotations

import numbers
from typing import Any

from ember.runtime import _C
from ember.runtime.errors import InvalidArgumentError


def kernel_names() -> list[str]:
    """Names of every kernel registered in this runtime, e.g. 'aten::add.Tensor'."""
    return list(_C.kernel_names())


def cpu_info() -> dict[str, Any]:
    """The CPU and the kernels chosen for it (detected once per process).

    Keys: ``model`` (the CPU's name), ``vendor`` ("intel", "amd" or "other": a few memory-access
    choices of the kernels depend on it), ``family`` (CPUID's display family: 0x19 for AMD Zen 3 and
    Zen 4, 0x1A for Zen 5, 6 for Intel's cores; 0 off x86), ``features`` (avx2, fma, f16c,
    avx512f/bw/vl, avx512_vnni, avx512_vbmi, avx_vnni, amx_tile, amx_int8: bool), ``best_isa`` (the
    highest kernel level this CPU runs), ``isa`` (the level in use: ``EMBER_KERNEL_ISA`` when set, else
    ``best_isa``), ``isa_error`` (why ``EMBER_KERNEL_ISA`` is refused, or None; loading a program then
    fails with it) and ``kernels`` (each kernel family, e.g. ``"f32.gemv"``, and the level its version
    uses). At the ``avx512`` level, ``cpu.linear_float_activations`` over 8-bit weights runs a copy
    that unpacks the codes with VPERMB where ``features["avx512_vbmi"]`` is true (the same results, bit
    for bit).
    """
    return dict(_C.cpu_info())


def core_round_trip_ns(cpu_a: int | None = None, cpu_b: int | None = None, trips: int = 20000) -> float:
    """How far apart two CPUs are: nanoseconds for a cache line to go from one to the other and back.

    Two threads, pinned to ``cpu_a`` and ``cpu_b`` (by default the first two CPUs this process may
    run on), hand one cache line back and forth ``trips`` times; the best of three batches. On a
    shared VM the result moves when the hypervisor moves the vCPUs (one 2-vCPU machine gave ~90 ns
    and ~375 ns at different minutes), and so do batched decode and every other multi-threaded step
    that hands data between threads: benchmarks print it beside their figures
    (``evals/machine_state.py``). Takes a few milliseconds (``trips`` x the round trip x 3; each
    batch stops after ~30 ms on a busy machine). Raises InvalidArgumentError for CPUs this process may
    not use, one CPU twice, or fewer than two CPUs; NotSupportedError off Linux; EmberIOError when
    the second thread gets no time on its CPU for a second.
    """
    import os

    if isinstance(trips, bool) or not isinstance(trips, numbers.Integral) or not 1 <= trips <= 10_000_000:
        raise InvalidArgumentError(f"trips must be an int in [1, 10000000], got {trips!r}")
    if cpu_a is None or cpu_b is None:
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if len(allowed) < 2:
            raise InvalidArgumentError(f"core_round_trip_ns needs two CPUs; this process may run on {allowed}")
        cpu_a = allowed[0] if cpu_a is None else cpu_a
        cpu_b = next(c for c in allowed if c != cpu_a) if cpu_b is None else cpu_b
    for name, cpu in (("cpu_a", cpu_a), ("cpu_b", cpu_b)):
        if isinstance(cpu, bool) or not isinstance(cpu, numbers.Integral):
            raise InvalidArgumentError(f"{name} must be a CPU number (int), got {cpu!r}")
    return float(_C.core_round_trip_ns(int(cpu_a), int(cpu_b), int(trips)))


def backend_ids() -> list[str]:
    return list(_C.backend_ids())


def set_num_threads(n: int) -> int:
    """Sets the kernel thread count (process-wide, shared with ember.runners and ember.load).

    ``n`` above the logical CPUs this process may use is lowered to that count with a
    RuntimeWarning (``max_num_threads()``). Returns the count in effect. If the OS refuses to
    start a worker thread, raises OutOfMemoryError once; the pool keeps the threads it started.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= 2**31 - 1:
        raise InvalidArgumentError(f"threads must be an int in [1, 2**31), got {n!r}; use about one per physical core")
    return int(_C.set_num_threads(int(n)))


def get_num_threads() -> int:
    """The kernel thread count in effect (process-wide)."""
    return int(_C.get_num_threads())


def max_num_threads() -> int:
    """The most kernel threads ember uses: the logical CPUs this process may run on."""
    return int(_C.max_num_threads())


def set_memory_limit(nbytes: int | None) -> None:
    """Sets the most bytes any one allocation sized by a program file may take (process-wide).

    Program state (the KV cache), each method's activation arena, a delegate's intermediate
    values and the runner's vocabulary-sized buffers are checked against it before they are
    allocated; a file that asks for more fails with OutOfMemoryError instead of exhausting the
    process. The default is the machine's physical memory, or the environment variable
    ``EMBER_MEMORY_LIMIT`` (e.g. ``8G``). ``None`` restores the default.
    """
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 < nbytes < 2**64):
        raise InvalidArgumentError(f"memory limit must be None or a byte count in [1, 2**64), got {nbytes!r}")
    _C.set_memory_limit(0 if nbytes is None else int(nbytes))


def get_memory_limit() -> int:
    """The memory limit in bytes now in force (see set_memory_limit)."""
    return int(_C.get_memory_limit())
