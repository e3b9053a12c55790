"""Decode attention over the KV cache alone, per kernel level: one query step of ember's cache
attention op (``ember::attend_cache`` / ``ember::attend_cache_int8``) at a given position, for a
stack of layers with their own caches, timed in the runtime.

    python evals/bench_attention.py [--kv-dtype int8] [--position 1900] [--levels avx512,avx512vnni]
                                    [--rounds 5] [--threads 2] [--json]

The shapes default to one layer of SmolLM2-135M (9 query heads over 3 KV heads of 64, a 2,048-slot
cache). Each level runs in its own process (``EMBER_KERNEL_ISA``; the level is chosen once per
process), and the levels take turns round by round, so a slow spell of a shared machine hits them
all. Per round, the median of several passes over the layers; ``cold`` passes first stream 64 MB
through the cache, as a decode step's weights evict the KV rows between tokens; ``hot`` passes find
one layer's rows in L2 (with ``--layers 30`` the rows of all layers no longer fit there, and the
passes measure the last-level cache more than the kernels). Reports microseconds per layer call,
including ~10 us of Python and method overhead per call (measure it with ``--position 10``). Not a
test: figures depend on the machine. Needs torch (to build the op's program).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEVELS = ["portable", "avx2", "avx512", "avx512vnni"]  # the attention kernels' levels (amx adds none)


def _program(args: argparse.Namespace, path: str):
    """Exports the op for these shapes into `path`; returns the inputs of every layer and the query."""
    import torch

    import ember.llm.ops  # noqa: F401  registers the ember ops
    from ember.export import lower

    scale = 1.0 / args.head_dim**0.5
    shape = (1, args.kv_heads, args.context, args.head_dim)

    class Attend(torch.nn.Module):
        def forward(self, q, *cache_and_pos):
            if args.kv_dtype == "int8":
                return torch.ops.ember.attend_cache_int8(q, *cache_and_pos, scale, 0, 0.0)
            return torch.ops.ember.attend_cache(q, *cache_and_pos, scale, 0, 0.0)

    gen = torch.Generator().manual_seed(0)
    layers = []
    for _ in range(args.layers):
        k, v = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
        if args.kv_dtype == "int8":
            (kc, ks), (vc, vs) = torch.ops.ember.quantize_kv(k), torch.ops.ember.quantize_kv(v)
            layers.append([kc, ks, vc, vs])
        else:
            dtype = torch.float16 if args.kv_dtype == "fp16" else torch.float32
            layers.append([k.to(dtype), v.to(dtype)])
    q = torch.randn(1, args.heads, 1, args.head_dim, generator=gen)
    pos = torch.tensor([args.position])
    ep = torch.export.export(Attend().eval(), (q, *layers[0], pos), strict=False)
    lower(ep).save(path)
    return q.numpy(), [[t.numpy() for t in layer] for layer in layers], pos.numpy()


def _worker(args: argparse.Namespace) -> None:
    """One level (EMBER_KERNEL_ISA set by the parent): prints {"cold": us, "hot": us} as JSON."""
    import numpy as np

    import ember.runtime

    ember.runtime.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="ember-bench-attention-") as directory:
        path = os.path.join(directory, "attention.ember")
        q, layers, pos = _program(args, path)
        prog = ember.runtime.load(path)
    flush = np.zeros(16 << 20, np.float32)  # 64 MB

    def one_pass(cold: bool) -> float:
        if cold:
            flush[:] += 1.0
        t0 = time.perf_counter()
        for layer in layers:
            prog.run("forward", q, *layer, pos)
        return (time.perf_counter() - t0) / len(layers) * 1e6

    one_pass(False)  # warm-up: first touches, pool start
    result = {kind: statistics.median(one_pass(kind == "cold") for _ in range(args.passes))
              for kind in ("cold", "hot")}
    info = ember.runtime.cpu_info()
    result["kernels"] = {k: v for k, v in info["kernels"].items()
                         if k.startswith("f32.i8_") or k == "f32.gemv_short_rows"}
    print(json.dumps(result))


def _supported() -> list[str]:
    import ember.runtime

    best = ember.runtime.cpu_info()["best_isa"]
    return LEVELS[: LEVELS.index(best) + 1] if best in LEVELS else LEVELS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kv-dtype", choices=["int8", "fp16", "fp32"], default="int8",
                    help="the cache's dtype (default int8)")
    ap.add_argument("--position", type=int, default=1900,
                    help="the query's position: it attends to position+1 keys (default 1900)")
    ap.add_argument("--context", type=int, default=2048, help="cache slots (default 2048)")
    ap.add_argument("--layers", type=int, default=1, help="layers, each with its own cache (default 1)")
    ap.add_argument("--heads", type=int, default=9, help="query heads (default 9)")
    ap.add_argument("--kv-heads", type=int, default=3, help="KV heads (default 3)")
    ap.add_argument("--head-dim", type=int, default=64, help="head dim (default 64)")
    ap.add_argument("--levels", default=None,
                    help="comma-separated kernel levels to compare (default: every level this CPU runs, from avx2 up)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, each running every level once (default 5)")
    ap.add_argument("--passes", type=int, default=21, help="passes over the layers per round and kind (default 21)")
    ap.add_argument("--threads", type=int, default=2, help="kernel threads (default 2)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.position < 0 or args.position >= args.context:
        ap.error(f"--position {args.position} must lie in [0, --context {args.context})")
    if args.heads % args.kv_heads:
        ap.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    if args.worker:
        _worker(args)
        return 0
    supported = _supported()
    levels = args.levels.split(",") if args.levels else [lv for lv in supported if lv != "portable"] or ["portable"]
    for level in levels:
        if level not in supported:
            ap.error(f"level {level!r} is not one this CPU runs; choose from {', '.join(supported)}")
    worker_args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--json"] + ["--worker"]
    runs: dict[str, list[dict]] = {level: [] for level in levels}
    for r in range(args.rounds):
        for level in levels:
            env = {**os.environ, "EMBER_KERNEL_ISA": level, "PYTHONPATH": str(ROOT)}
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *worker_args], env=env,
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            runs[level].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            if not args.json:
                print(f"round {r + 1}/{args.rounds} {level}: cold {runs[level][-1]['cold']:.1f} us, "
                      f"hot {runs[level][-1]['hot']:.1f} us", file=sys.stderr, flush=True)
    summary = {
        "kv_dtype": args.kv_dtype, "position": args.position, "layers": args.layers, "threads": args.threads,
        "shape": {"heads": args.heads, "kv_heads": args.kv_heads, "head_dim": args.head_dim, "context": args.context},
        "levels": {level: {"cold_us": statistics.median(x["cold"] for x in rs),
                           "hot_us": statistics.median(x["hot"] for x in rs),
                           "cold_runs": [round(x["cold"], 1) for x in rs], "kernels": rs[0]["kernels"]}
                   for level, rs in runs.items()},
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"attention at position {args.position}, {args.kv_dtype} cache, {args.heads}/{args.kv_heads} heads of "
          f"{args.head_dim}, {args.threads} threads; us per layer call, median of {args.rounds} rounds")
    print(f"{'level':12s} {'cold':>8s} {'hot':>8s}  kernels")
    for level, s in summary["levels"].items():
        kernels = ", ".join(f"{k}={v}" for k, v in s["kernels"].items())
        print(f"{level:12s} {s['cold_us']:8.1f} {s['hot_us']:8.1f}  {kernels}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
