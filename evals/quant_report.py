"""Export a model with every quantization recipe and print one table: size, quality, speed.

    python evals/quant_report.py SOURCE [--recipes fp32,q8,q4,8da4w,gguf,...] [--tokens 4096]

For each recipe: ``export_llm(SOURCE, quant=recipe, logits="all")``, then ``ember.evals.evaluate``
against SOURCE run in transformers at fp32 (perplexity, ratio, mean KL, top-1 agreement) and the
decode speed of 64 greedy tokens after a 128-token prompt (median of --repeats). The reference is
loaded once. Default SOURCE: the packaged SmolLM2-135M-Instruct GGUF.
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
DEFAULT_RECIPES = "fp32,q8,q4,8da4w,gguf,8w,8da8w,4w-g32-sym,4w-g32-asym,4w-g32-hqq,8da4w-g32-asym-float"


def _quant(name: str) -> Any:
    """A recipe name -> what export_llm's ``quant`` takes."""
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


def _decode_speed(path: Path, gen_len: int, repeats: int, threads: int) -> float:
    """Median decode tok/s of ``gen_len`` greedy tokens after a 128-token prompt of prose."""
    import ember

    llm = ember.load(path, threads=threads)
    prompt = llm.tokenizer.encode("It is a truth universally acknowledged " * 16)[:128]
    speeds = []
    for _ in range(repeats):
        llm.reset()
        llm.generate_ids(prompt, max_new_tokens=gen_len, temperature=0)
        speeds.append(llm.stats.decode_tokens_per_s)
    return statistics.median(speeds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", nargs="?", help="HF checkpoint folder or .gguf (default: the packaged SmolLM2 GGUF)")
    p.add_argument("--recipes", default=DEFAULT_RECIPES, help=f"comma-separated (default: {DEFAULT_RECIPES})")
    p.add_argument("--text", help="corpus (default: the bundled Pride and Prejudice)")
    p.add_argument("--tokens", type=int, default=4096, help="tokens evaluated (default 4096)")
    p.add_argument("--window", type=int, default=512, help="perplexity window (default 512)")
    p.add_argument("--gen-len", type=int, default=64, help="greedy tokens timed for decode speed (default 64)")
    p.add_argument("--repeats", type=int, default=3, help="decode timing repeats, median reported (default 3)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="folder for the exported files (default: a temporary folder)")
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
    rows = []
    for name in names:
        path = out / f"{name}.ember"
        started = time.perf_counter()
        try:
            export_llm(source, path, quant=quants[name], logits="all", max_context_len=args.window,
                       max_seq_len=min(args.window, 128), progress=False)
        except ValueError as exc:  # e.g. gguf for a non-GGUF source
            print(f"{name}: skipped ({exc})", file=sys.stderr)
            continue
        export_s = time.perf_counter() - started
        result = evaluate(path, args.text, reference=reference, tokens=args.tokens, window=args.window,
                          progress=False, threads=args.threads)
        r = result.as_dict()
        rows.append({"recipe": name, "file_mb": round(path.stat().st_size / 1e6, 1), "export_s": round(export_s, 1),
                     "perplexity": r["perplexity"], "ratio": r["ppl_ratio"], "kl_mean": r["kl_mean"],
                     "top1": r["top1"], "decode_tok_s": round(_decode_speed(path, args.gen_len, args.repeats, args.threads), 1)})
        print(f"{name}: done", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"reference: {source} (transformers fp32); {args.tokens} tokens in windows of {args.window}")
    print("| recipe | file MB | perplexity | ratio | KL mean | top-1 | decode tok/s | export s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['recipe']} | {r['file_mb']} | {r['perplexity']:.3f} | {r['ratio']:.4f} | {r['kl_mean']:.4f} | "
              f"{r['top1'] * 100:.1f}% | {r['decode_tok_s']} | {r['export_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
