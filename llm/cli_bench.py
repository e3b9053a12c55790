"""`ember bench`: prefill and decode speed, time to first token, load time and peak RSS of a .ember LLM.

The table follows llama-bench: one row per test (pp<N>: prefill of an N-token prompt, tg<N>:
generating N tokens), tokens/s as mean +- standard deviation over the repeats, with the model,
its size and parameter count, weight dtype or quantization recipe, kernel path and threads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

from ember.cli import fail
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
        rng = random.Random(0)  # not numpy: `ember bench` keeps it out of the process (peak RSS)
        return [rng.randrange(llm.vocab_size) for _ in range(length)]
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
    cpu = info["model"] or platform.processor() or platform.machine()
    if info["family"]:  # a VM's model name can be just "AMD EPYC": the family tells Zen 3/4 (0x19) from Zen 5 (0x1A)
        cpu = f"{cpu}, family 0x{info['family']:X}"
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "platform": platform.platform(), "features": features,
            "isa": info["isa"], "kernels": info["kernels"]}


def spread(test: str, values: list[float]) -> dict[str, Any]:
    """One llama-bench row: the test label and tokens/s as mean and (sample) standard deviation."""
    return {"test": test, "tokens_per_s_mean": statistics.fmean(values),
            "tokens_per_s_std": statistics.stdev(values) if len(values) > 1 else 0.0, "values": list(values)}


def model_summary(metadata: dict[str, Any], file_size: int) -> dict[str, Any]:
    """What llama-bench's model, size and params columns show, from the file's metadata."""
    recipe = metadata.get("quant.recipe")
    dtype = metadata.get("export.dtype", "?")
    return {"family": metadata.get("llm.family", "?"), "size_bytes": file_size, "n_params": metadata.get("llm.n_params"),
            "type": recipe if recipe not in (None, "none", "float") else dtype}


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
    from ember import __version__
    from ember.runtime import get_num_threads

    return {
        "file": path,
        "ember_version": __version__,
        "model": model_summary(llm.metadata, os.path.getsize(path)),
        "tests": [spread(f"pp{prompt_len}", [r.prefill_tokens_per_s for r in runs]),
                  spread(f"tg{gen_len}", [r.decode_tokens_per_s for r in runs])],
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
            return fail("bench", f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}", 2)
    if args.warmup < 0:
        return fail("bench", f"--warmup must be >= 0, got {args.warmup}", 2)
    if args.threads is not None and not 1 <= args.threads < 2**31:
        return fail("bench", f"--threads must be in [1, 2**31), got {args.threads}", 2)
    text_path = Path(args.text) if args.text else _default_text_path()
    try:
        result = bench(args.file, args.prompt_len, args.gen_len, args.repeats, args.warmup, args.threads, text_path,
                       args.mmap)
    except (ValueError, OSError, RuntimeError) as error:
        return fail("bench", error, 1)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(render_table(result))
    return 0


def render_table(result: dict[str, Any]) -> str:
    """llama-bench's markdown table, then the machine, kernels and the other measurements."""
    m, model = result["machine"], result["model"]
    params = f"{model['n_params'] / 1e6:.2f} M" if model["n_params"] else "?"
    header = ["model", "size", "params", "type", "kernels", "threads", "test", "t/s"]
    rows = [[model["family"], f"{model['size_bytes'] / 2**20:.2f} MiB", params, model["type"], m["isa"],
             str(result["threads"]), t["test"], f"{t['tokens_per_s_mean']:.2f} ± {t['tokens_per_s_std']:.2f}"]
            for t in result["tests"]]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    right = {1, 2, 5, 6, 7}  # numbers right-aligned, as llama-bench does
    line = lambda cells: "| " + " | ".join(c.rjust(w) if i in right else c.ljust(w)  # noqa: E731
                                           for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    out = [line(header), "| " + " | ".join(("-" * (w - 1) + ":") if i in right else "-" * w
                                          for i, w in enumerate(widths)) + " |"]
    out += [line(r) for r in rows]
    below = sorted(f"{name} {isa}" for name, isa in m["kernels"].items() if isa != m["isa"])
    out.append("")
    out.append(f"ember {result['ember_version']}; {result['file']}; {m['cpu']} ({m['logical_cpus']} logical CPUs, "
               f"{', '.join(m['features']) or 'no SIMD features beyond baseline'})"
               + (f"; below {m['isa']}: {', '.join(below)}" if below else ""))
    out.append(f"{result['repeats']} repeats (greedy, EOS ignored, cache reset between runs): "
               f"load {result['load_ms']:.1f} ms ({result['weights']}), first token "
               f"{result['time_to_first_token_ms']:.1f} ms (median), sampling {result['sampling_ms']:.2f} ms, "
               f"peak RSS {result['peak_rss_bytes'] / 2**20:.1f} MiB")
    return "\n".join(out)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure prefill/decode tokens/s, first-token latency, load time and memory",
        description="Benchmark a .ember LLM: load it, then run warm-up + REPEATS greedy generations of GEN_LEN "
                    "tokens after a PROMPT_LEN-token prompt (real prose, cache reset between runs). Prints "
                    "llama-bench's table: pp<PROMPT_LEN> (prefill) and tg<GEN_LEN> (generation) in tokens/s, mean "
                    "± standard deviation over the repeats. The prompt comes from --text, $EMBER_BENCH_TEXT, or "
                    "the Pride and Prejudice text bundled with ember.evals.",
    )
    parser.add_argument("file", metavar="FILE", help="a .ember LLM file")
    parser.add_argument("--prompt-len", type=int, default=128, help="prompt tokens (default 128)")
    parser.add_argument("--gen-len", type=int, default=128, help="generated tokens, EOS ignored (default 128)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="measured runs; mean ± standard deviation in the table, medians in --json (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (default 1)")
    add_load_arguments(parser)
    parser.add_argument("--text", default=None, metavar="PATH", help="text file the prompt is tokenized from")
    parser.add_argument("--json", action="store_true", help="print the results (and every run) as JSON")
    parser.set_defaults(func=run)
