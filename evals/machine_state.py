"""How fast a shared machine is while a benchmark runs: a streaming read of a 90 MiB buffer (about a
4-bit SmolLM2's weights) by the benchmark's threads, taken at the start and at the end of a run.

On the 2-core Intel Xeon VM the same read gave ~47 GB/s in its normal phase and 8-13 GB/s in its slow
ones, and every ratio these benchmarks report moved with it (serving 4 vs 1 clients, late vs early
decode): figures from runs whose probes differ that much do not compare.
"""

from __future__ import annotations

from bench_peers import bandwidth_gbs

PROBE_MIB = 90


def read_gbs(threads: int) -> float:
    """GB/s of the best of 10 reads of PROBE_MIB MiB by `threads` threads."""
    return bandwidth_gbs(threads, PROBE_MIB, repeats=10)


def describe(start: float, end: float) -> str:
    return f"machine state: a {PROBE_MIB} MiB read at {start:.1f} GB/s before the runs, {end:.1f} GB/s after"
