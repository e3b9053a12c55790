"""llama.cpp's quality on the same yardstick as `ember eval`: perplexity, KL, top-1 vs transformers fp32.

    python evals/llama_cpp_quality.py FILE.ember [MORE.ember ...] [--gguf PATH] [--llama q4_1,q4_0,q8_0]
                                      [--tokens 4096] [--window 512] [--threads 2] [--json]

Every model sees the same token ids: the windows of the bundled corpus cut with the first .ember
file's tokenizer (exported from --gguf, the packaged SmolLM2 Q4_1 file by default). The reference
is --gguf dequantized to fp32 in transformers, run once per window. llama.cpp (`llama-cpp-python`,
the optional `bench` extra) scores the packaged file itself (q4_1) and Q4_0 / Q8_0 requantized from
it, with every position's logits; ember scores each .ember file given (export them with
`--logits all` for speed). One table: perplexity, ratio to the reference, KL mean / p99, top-1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "evals"))
from bench_peers import LLAMA_TYPES, llama_file  # noqa: E402  (a sibling script)

Scorer = Callable[[list[int]], np.ndarray]  # token ids [L] -> logits [L, V]


def llama_scorer(path: Path, window: int, threads: int) -> Scorer:
    import llama_cpp

    llm = llama_cpp.Llama(str(path), n_ctx=window, n_batch=window, n_ubatch=window, n_threads=threads,
                          n_threads_batch=threads, logits_all=True, flash_attn=True, verbose=False)

    def score(ids: list[int]) -> np.ndarray:
        llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)], dtype=np.float32)

    return score


def main(argv: list[str] | None = None) -> int:
    from ember.evals.corpus import BUNDLED_CORPUS, Corpus, corpus_windows
    from ember.evals.file_model import FileModel
    from ember.evals.metrics import Tally
    from ember.evals.reference import ReferenceModel

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, help=".ember files exported from --gguf")
    p.add_argument("--gguf", type=Path, default=None, help="the source GGUF (default: the packaged SmolLM2 Q4_1)")
    p.add_argument("--llama", default="q4_1", help=f"llama.cpp types, from {sorted(LLAMA_TYPES)}")
    p.add_argument("--work-dir", type=Path, default=Path("bench-peers"), help="requantized GGUFs (kept)")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from ember.llm.default_model import packaged_gguf

    gguf = args.gguf or packaged_gguf()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    files = [FileModel(f, threads=args.threads) for f in args.files]
    windows = corpus_windows(Corpus.from_file(BUNDLED_CORPUS), files[0].tokenizer, args.window,
                             args.tokens // args.window, files[0].bos_prefix)
    reference = ReferenceModel.load(str(gguf))
    scorers: dict[str, Scorer] = {}
    for path, f in zip(args.files, files):
        scorers[f"ember {path.name}"] = lambda ids, f=f: (f.reset(), f.logits(ids))[1]
    for name in (n for n in args.llama.split(",") if n):
        if name not in LLAMA_TYPES:
            p.error(f"--llama: unknown type {name!r}; choose from {sorted(LLAMA_TYPES)}")
        scorers[f"llama.cpp {name}"] = llama_scorer(llama_file(args.work_dir, gguf, name, reuse=True), args.window,
                                                    args.threads)
    tallies = {name: Tally() for name in scorers}
    for i, ids in enumerate(windows):
        ref = reference.logits(ids)[:-1]
        targets = np.asarray(ids[1:])
        for name, score in scorers.items():
            tallies[name].add(score(ids)[:-1], targets, ref)
        print(f"window {i + 1}/{len(windows)}", file=sys.stderr)
    rows = {name: t.summary() for name, t in tallies.items()}
    if args.json:
        print(json.dumps({"reference": gguf.name, "tokens": len(windows) * args.window, "rows": rows}, indent=2))
        return 0
    print(f"{len(windows) * args.window} tokens in windows of {args.window}; reference: {gguf.name} in transformers, fp32")
    print("| model | perplexity | ratio | KL mean | KL p99 | top-1 |\n| --- | --- | --- | --- | --- | --- |")
    for name, s in rows.items():
        print(f"| {name} | {s['perplexity']:.3f} | {s['ppl_ratio']:.4f} | {s['kl_mean']:.4f} | {s['kl_p99']:.4f} | "
              f"{100 * s['top1']:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
