"""Export a model with every quantization recipe and print one table: size, quality, speed.

    python evals/quant_report.py SOURCE [--recipes fp32,q8,q4,8da4w,gguf,gguf-a8,...] [--tokens 4096]

A name ending in "-a8" is that recipe exported with ``--qactivations int8``.

For each recipe: ``export_llm(SOURCE, quant=recipe, logits="all")``, then ``ember.evals.evaluate``
against SOURCE run in transformers at fp32 (perplexity, ratio, mean KL, top-1 agreement). The
reference is loaded once. Then decode speed: every file loaded at once, and --repeats rounds that
each time 64 greedy tokens after a 128-token prompt on every file in turn (interleaved, so a slow
spell of a shared machine hits every recipe alike); the median and the range are reported.
Default SOURCE: the packaged SmolLM2-135M-Instruct GGUF. --reuse keeps files already in --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Recipes beyond the presets, named as the report prints them.
EXTRA_RECIPES = {
    "8w": "--qlinear 8w --qlinear-group-size 0 --qembedding 8w",
    "8da8w": "--qlinear 8da8w --qlinear-group-size 0 --qembedding 8w",
    "4w-g32-sym": "--qlinear 4w --qlinear-group-size 32 --qembedding 8w",
    "4w-g32-asym": "--qlinear 4w --qlinear-group-size 32 --qlinear-mapping asym --qembedding 8w",
    "4w-g32-hqq": "--qlinear 4w --qlinear-group-size 32 --qlinear-algorithm hqq --qembedding 8w",
    "8da4w-g32-asym-float": "--qlinear 8da4w --qlinear-group-size 32 --qlinear-mapping asym-float --qscale-dtype float16 --qembedding 8w",
}
DEFAULT_RECIPES = ("fp32,q8,q4,8da4w,gguf,q4-a8,gguf-a8,8w,8da8w,4w-g32-sym,4w-g32-asym,4w-g32-hqq,"
                   "8da4w-g32-asym-float")
A8_SUFFIX = "-a8"  # any recipe + "-a8": its weight-only linears with int8 activations (--qactivations int8)


def _activations(name: str) -> tuple[str, str]:
    """A report name -> (recipe name, qactivations)."""
    return (name[: -len(A8_SUFFIX)], "int8") if name.endswith(A8_SUFFIX) else (name, "float")


def _quant(name: str) -> Any:
    """A recipe name -> what export_llm's ``quant`` takes."""
    name = _activations(name)[0]
    from ember.quant.cli_args import add_quant_arguments, recipe_from_args
    from ember.quant.presets import preset_names

    if name == "fp32":
        return None
    if name in preset_names():
        return name
    if name not in EXTRA_RECIPES:
        raise SystemExit(f"unknown recipe {name!r}; use presets {preset_names()}, fp32 or one of {sorted(EXTRA_RECIPES)}")
    parser = argparse.ArgumentParser()
    add_quant_arguments(parser)
    recipe = recipe_from_args(parser.parse_args(EXTRA_RECIPES[name].split()))
    return type(recipe)(linear=recipe.linear, embedding=recipe.embedding, output=recipe.output,
                        overrides=recipe.overrides, name=name)


def decode_speeds(paths: dict[str, Path], gen_len: int, repeats: int, threads: int) -> dict[str, list[float]]:
    """Decode tok/s of ``gen_len`` greedy tokens after a 128-token prompt of prose, per file:
    ``repeats`` rounds, each running every file once (interleaved), after one warm-up round."""
    import ember

    llms = {name: ember.load(path, threads=threads) for name, path in paths.items()}
    prompts = {}
    for name, llm in llms.items():
        length = max(1, min(128, llm.max_context_len - gen_len))
        prompts[name] = llm.tokenizer.encode("It is a truth universally acknowledged " * 16)[:length]
    speeds: dict[str, list[float]] = {name: [] for name in paths}
    for round_ in range(repeats + 1):
        for name, llm in llms.items():
            llm.reset()
            llm.generate_ids(prompts[name], max_new_tokens=gen_len, temperature=0, ignore_eos=True)
            if round_ > 0:
                speeds[name].append(llm.stats.decode_tokens_per_s)
    return speeds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", nargs="?", help="HF checkpoint folder or .gguf (default: the packaged SmolLM2 GGUF)")
    p.add_argument("--recipes", default=DEFAULT_RECIPES, help=f"comma-separated (default: {DEFAULT_RECIPES})")
    p.add_argument("--text", help="corpus (default: the bundled Pride and Prejudice)")
    p.add_argument("--tokens", type=int, default=4096, help="tokens evaluated (default 4096)")
    p.add_argument("--window", type=int, default=512, help="perplexity window (default 512)")
    p.add_argument("--gen-len", type=int, default=64, help="greedy tokens timed for decode speed (default 64)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved decode rounds, median reported (default 5)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="folder for the exported files (default: a temporary folder)")
    p.add_argument("--reuse", action="store_true", help="use files already in --out instead of exporting them again")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = p.parse_args(argv)

    from ember.evals import evaluate
    from ember.evals.reference import ReferenceModel
    from ember.llm.exporter import export_llm

    source = args.source
    if source is None:
        from ember.llm.default_model import packaged_gguf

        source = str(packaged_gguf())
    names = [n.strip() for n in args.recipes.split(",") if n.strip()]
    quants = {n: _quant(n) for n in names}  # every name checked before the slow part
    out = Path(args.out or tempfile.mkdtemp(prefix="ember_quant_report_"))
    out.mkdir(parents=True, exist_ok=True)
    reference = ReferenceModel.load(source).model  # loaded once, reused for every recipe
    rows, paths = [], {}
    for name in names:
        path = out / f"{name}.ember"
        export_s = None
        if not (args.reuse and path.exists()):
            started = time.perf_counter()
            try:
                export_llm(source, path, quant=quants[name], logits="all", max_context_len=args.window,
                           max_seq_len=min(args.window, 128), progress=False, qactivations=_activations(name)[1])
            except ValueError as exc:  # e.g. gguf for a non-GGUF source
                print(f"{name}: skipped ({exc})", file=sys.stderr)
                continue
            export_s = round(time.perf_counter() - started, 1)
        result = evaluate(path, args.text, reference=reference, tokens=args.tokens, window=args.window,
                          progress=False, threads=args.threads)
        r = result.as_dict()
        paths[name] = path
        rows.append({"recipe": name, "file_mb": round(path.stat().st_size / 1e6, 1), "export_s": export_s,
                     "perplexity": r["perplexity"], "ratio": r["ppl_ratio"], "kl_mean": r["kl_mean"], "top1": r["top1"]})
        print(f"{name}: evaluated", file=sys.stderr)
    speeds = decode_speeds(paths, args.gen_len, args.repeats, args.threads)
    for row in rows:
        s = speeds[row["recipe"]]
        row.update(decode_tok_s=round(statistics.median(s), 1), decode_min=round(min(s), 1), decode_max=round(max(s), 1))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from ember.runtime import cpu_info

    info = cpu_info()
    print(f"reference: {source} (transformers fp32); {args.tokens} tokens in windows of {args.window}; "
          f"decode: median (range) of {args.repeats} interleaved rounds, {args.threads} threads, "
          f"{info['model']} ({info['isa']} kernels)")
    print("| recipe | file MB | perplexity | ratio | KL mean | top-1 | decode tok/s | export s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        export_s = "-" if r["export_s"] is None else r["export_s"]
        print(f"| {r['recipe']} | {r['file_mb']} | {r['perplexity']:.3f} | {r['ratio']:.4f} | {r['kl_mean']:.4f} | "
              f"{r['top1'] * 100:.1f}% | {r['decode_tok_s']} ({r['decode_min']}-{r['decode_max']}) | {export_s} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
