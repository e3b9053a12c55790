"""How fast a shared machine is while a benchmark runs: a streaming read of a 90 MiB buffer (about a
4-bit SmolLM2's weights) by the benchmark's threads, taken at the start and at the end of a run, and
how far apart its first two CPUs are (a cache line's round trip between two pinned threads,
ember.runtime.core_round_trip_ns).

On the 2-core Zen 5 VM the round trip was ~90 ns at some minutes and ~375 ns at others, switching
every few seconds to minutes as the hypervisor moved the vCPUs: one session's decode step did not
change, while 4 batched sessions' step (whose threads hand activations, outputs and job lines to each
other hundreds of times per step) took ~15-25% longer far apart, and `bench_serve.py`'s 4-vs-1
ratio fell from ~2.5-2.7x to ~2.1-2.3x.

On the 2-core Intel Xeon VM the same read gave ~47 GB/s in its normal phase and 8-13 GB/s in its slow
ones, and every ratio these benchmarks report moved with it (serving 4 vs 1 clients, late vs early
decode): figures from runs whose probes differ that much do not compare. As a script it prints the
read, or waits for a rate before running a benchmark:

    python evals/machine_state.py --wait-for 35 -- python evals/bench_serve.py smol.ember --clients 1,4
"""

from __future__ import annotations

from bench_peers import bandwidth_gbs

PROBE_MIB = 90


def read_gbs(threads: int) -> float:
    """GB/s of the best of 10 reads of PROBE_MIB MiB by `threads` threads."""
    return bandwidth_gbs(threads, PROBE_MIB, repeats=10)


def trip_ns() -> float | None:
    """A cache line's round trip between this process's first two CPUs, in ns (None with one CPU)."""
    import os

    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        return None  # one CPU, or a platform that cannot pin threads (the probe is Linux only)
    import ember.runtime

    return ember.runtime.core_round_trip_ns()


# A pair of CPUs whose cache line round trip is below NEAR_NS shares a last-level cache ("near"); above
# FAR_NS it does not ("far"). The 2-core Zen 5 VM measured ~65-140 ns and ~340-430 ns, nothing between for
# long: a run whose probes fall on both sides, or between, switched during it ("mixed").
NEAR_NS, FAR_NS = 200.0, 300.0


def distance(trips: list[float | None]) -> str:
    """'near', 'far' or 'mixed' for a run's round trip probes (all of them), 'unknown' with one CPU."""
    if not trips or any(t is None for t in trips):
        return "unknown"
    if max(trips) < NEAR_NS:
        return "near"
    if min(trips) > FAR_NS:
        return "far"
    return "mixed"


def describe_trip(ns: float | None) -> str:
    return "one CPU" if ns is None else f"a line's round trip between two CPUs {ns:.0f} ns"


def describe(start: float, end: float) -> str:
    return f"machine state: a {PROBE_MIB} MiB read at {start:.1f} GB/s before the runs, {end:.1f} GB/s after"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os
    import sys
    import time

    ap = argparse.ArgumentParser(
        prog="python evals/machine_state.py",
        description=f"Print the machine's state (a {PROBE_MIB} MiB read by --threads threads, GB/s). With --wait-for, "
                    "probe every --every seconds until the read reaches that rate, then run COMMAND (e.g. a "
                    "benchmark) in this process's place; exit 1 if --timeout passes first.")
    ap.add_argument("--threads", type=int, default=2, help="reading threads (default 2: the benchmarks' own)")
    ap.add_argument("--wait-for", type=float, default=None, metavar="GBS", help="the rate to wait for")
    ap.add_argument("--every", type=float, default=120.0, metavar="S", help="seconds between probes (default 120)")
    ap.add_argument("--timeout", type=float, default=3 * 3600.0, metavar="S",
                    help="give up after S seconds (default 3 h)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]: run once the rate is reached")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command and args.wait_for is None:
        ap.error("COMMAND needs --wait-for GBS")
    deadline = time.monotonic() + args.timeout
    while True:
        gbs = read_gbs(args.threads)
        threads = f"{args.threads} thread{'s' * (args.threads != 1)}"
        print(f"{time.strftime('%H:%M:%S')} a {PROBE_MIB} MiB read by {threads}: {gbs:.1f} GB/s; "
              f"{describe_trip(trip_ns())}", flush=True)
        if args.wait_for is None:
            return 0
        if gbs >= args.wait_for:
            break
        if time.monotonic() + args.every > deadline:
            print(f"machine_state: the read stayed under {args.wait_for:g} GB/s for {args.timeout:g} s",
                  file=sys.stderr)
            return 1
        time.sleep(args.every)
    if command:
        os.execvp(command[0], command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
