"""`ember bench`: prefill and decode speed, time to first token, load time and peak RSS of a .ember LLM."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ember.llm.cli_generate import add_load_arguments

_FALLBACK_TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife. However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
    "the rightful property of some one or other of their daughters. "
)


def _default_text_path() -> Path | None:
    """$EMBER_BENCH_TEXT, else the corpus bundled with ember.evals (Pride and Prejudice)."""
    env = os.environ.get("EMBER_BENCH_TEXT")
    if env:
        return Path(env)
    from ember.evals.corpus import BUNDLED_CORPUS  # a path constant; imports neither torch nor the runtime

    return BUNDLED_CORPUS if BUNDLED_CORPUS.exists() else None


def prompt_ids(llm: Any, length: int, text_path: Path | None) -> list[int]:
    """`length` token ids of real prose (tokenized by the file's tokenizer, repeated as needed);
    deterministic pseudo-random ids when the file has no tokenizer."""
    if "tokenizer.kind" not in llm.metadata:
        import numpy as np

        return [int(t) for t in np.random.default_rng(0).integers(0, llm.vocab_size, size=length)]
    text = text_path.read_text(encoding="utf-8", errors="replace")[: 40 * length + 4000] if text_path else _FALLBACK_TEXT
    ids = llm.tokenizer.encode(text)
    while len(ids) < length:
        ids = ids + llm.tokenizer.encode(text, add_special_tokens=False)
    return ids[:length]


def machine() -> dict[str, Any]:
    """The CPU, its features and the kernel level each kernel family runs at (from the runtime)."""
    from ember.runtime import cpu_info

    info = cpu_info()
    features = [name for name, present in info["features"].items() if present]
    return {"cpu": info["model"] or platform.processor() or platform.machine(), "logical_cpus": os.cpu_count(),
            "platform": platform.platform(), "features": features, "isa": info["isa"], "kernels": info["kernels"]}


def bench(path: str, prompt_len: int, gen_len: int, repeats: int, warmup: int, threads: int | None,
          text_path: Path | None, mmap: bool = False) -> dict[str, Any]:
    from ember.llm.api import load

    t0 = time.perf_counter()
    llm = load(path, threads=threads, mmap=mmap)
    load_ms = (time.perf_counter() - t0) * 1000
    if prompt_len + gen_len > llm.max_context_len:
        raise ValueError(f"--prompt-len {prompt_len} + --gen-len {gen_len} exceeds the context of "
                         f"{llm.max_context_len} tokens; lower them")
    ids = prompt_ids(llm, prompt_len, text_path)
    runs = []
    for i in range(warmup + repeats):
        llm.reset()  # no prefix reuse: every run prefills the whole prompt
        llm.generate_ids(ids, max_new_tokens=gen_len, temperature=0.0, ignore_eos=True)
        if i >= warmup:
            runs.append(llm.stats)
    med = lambda name: statistics.median(getattr(r, name) for r in runs)  # noqa: E731
    from ember.runtime import get_num_threads

    return {
        "file": path,
        "machine": machine(),
        "threads": get_num_threads(),
        "prompt_tokens": prompt_len,
        "generated_tokens": gen_len,
        "repeats": repeats,
        "load_ms": load_ms,
        "weights": "mapped" if mmap else "copied to huge-page memory",
        "prefill_tokens_per_s": med("prefill_tokens_per_s"),
        "decode_tokens_per_s": med("decode_tokens_per_s"),
        "time_to_first_token_ms": med("time_to_first_token_ms"),
        "sampling_ms": med("sampling_ms"),
        "peak_rss_bytes": max(r.peak_rss_bytes for r in runs),
        "runs": [r.as_dict() for r in runs],
    }


def run(args: argparse.Namespace) -> int:
    for name in ("prompt_len", "gen_len", "repeats"):
        if getattr(args, name) < 1:
            print(f"ember bench: error: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    if args.warmup < 0:
        print(f"ember bench: error: --warmup must be >= 0, got {args.warmup}", file=sys.stderr)
        return 2
    if args.threads is not None and not 1 <= args.threads < 2**31:
        print(f"ember bench: error: --threads must be in [1, 2**31), got {args.threads}", file=sys.stderr)
        return 2
    text_path = Path(args.text) if args.text else _default_text_path()
    try:
        result = bench(args.file, args.prompt_len, args.gen_len, args.repeats, args.warmup, args.threads, text_path,
                       args.mmap)
    except (ValueError, OSError, RuntimeError) as error:
        print(f"ember bench: error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    m = result["machine"]
    print(f"{result['file']} on {m['cpu']} ({m['logical_cpus']} logical CPUs), {result['threads']} threads")
    print(f"  kernels: {m['isa']} (CPU features: {', '.join(m['features']) or 'none beyond baseline'})")
    below = sorted(f"{name} {isa}" for name, isa in m["kernels"].items() if isa != m["isa"])
    if below:
        print(f"  below {m['isa']}: {', '.join(below)}")
    print(f"  prompt {result['prompt_tokens']} tokens, generate {result['generated_tokens']} (greedy), "
          f"median of {result['repeats']}")
    print(f"  load            {result['load_ms']:10.1f} ms ({result['weights']})")
    print(f"  prefill         {result['prefill_tokens_per_s']:10.1f} tokens/s")
    print(f"  first token     {result['time_to_first_token_ms']:10.1f} ms")
    print(f"  decode          {result['decode_tokens_per_s']:10.1f} tokens/s")
    print(f"  sampling        {result['sampling_ms']:10.2f} ms total")
    print(f"  peak RSS        {result['peak_rss_bytes'] / 2**20:10.1f} MiB")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure prefill/decode tokens/s, first-token latency, load time and memory",
        description="Benchmark a .ember LLM: load it, then run warm-up + REPEATS greedy generations of GEN_LEN "
                    "tokens after a PROMPT_LEN-token prompt (real prose, cache reset between runs) and report "
                    "medians. The prompt comes from --text, $EMBER_BENCH_TEXT, or the Pride and Prejudice text "
                    "bundled with ember.evals.",
    )
    parser.add_argument("file", metavar="FILE", help="a .ember LLM file")
    parser.add_argument("--prompt-len", type=int, default=128, help="prompt tokens (default 128)")
    parser.add_argument("--gen-len", type=int, default=128, help="generated tokens, EOS ignored (default 128)")
    parser.add_argument("--repeats", type=int, default=3, help="measured runs; medians are reported (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (default 1)")
    add_load_arguments(parser)
    parser.add_argument("--text", default=None, metavar="PATH", help="text file the prompt is tokenized from")
    parser.add_argument("--json", action="store_true", help="print the results (and every run) as JSON")
    parser.set_defaults(func=run)
