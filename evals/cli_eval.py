"""`ember eval FILE`: perplexity of a .ember file on a text, optionally against the source model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ember.cli import fail

__all__ = ["register"]


def run(args: argparse.Namespace) -> int:
    from ember.evals.errors import EvalError
    from ember.evals.perplexity import evaluate
    from ember.evals.recording import record
    from ember.runtime.errors import EmberError

    try:
        result = evaluate(args.file, text=args.text, reference=args.reference, tokens=args.tokens,
                          window=args.window, progress=not args.quiet, threads=args.threads, mmap=args.mmap)
    except (EvalError, EmberError) as error:
        return fail("eval", error, 1)
    recorded = None
    if args.record:
        try:
            recorded = record(args.file, result)
        except (EvalError, EmberError, OSError) as error:
            print(result.table())
            return fail("eval", f"could not record the results in {args.file} (the file is unchanged): {error}", 1)
    for note in result.notes:
        print(f"ember eval: note: {note}", file=sys.stderr)
    sys.stderr.flush()
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(result.table())
    if recorded is not None:
        print(f"ember eval: recorded {len(recorded)} eval.* entries in {args.file} (see `ember inspect`)",
              file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    from ember.evals.corpus import DEFAULT_TOKENS, DEFAULT_WINDOW

    p = sub.add_parser(
        "eval", help="perplexity of a .ember file, optionally against the source model (KL, top-1)",
        description="Perplexity of FILE over non-overlapping windows of a text, each evaluated from position 0. "
                    "With --reference (the HF checkpoint folder or .gguf the file came from, run in transformers "
                    "at fp32 on the same token ids): the reference's perplexity, the ratio, KL(reference || file) "
                    "mean and p99, top-1 agreement and the largest logit error. A file exported with --logits all runs "
                    "in chunks of llm.max_seq_len tokens; one exported for generation runs token by token (slower).")
    p.add_argument("file", metavar="FILE", help="a .ember LLM file")
    p.add_argument("--text", metavar="CORPUS.txt", default=None,
                   help="UTF-8 text to evaluate on (default: the bundled Pride and Prejudice)")
    p.add_argument("--reference", metavar="SRC", default=None,
                   help="the source model: an HF checkpoint folder or a .gguf file (needs torch + transformers)")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, metavar="N",
                   help=f"evaluate the first N tokens of the text, in whole windows (default {DEFAULT_TOKENS})")
    p.add_argument("--window", type=int, default=None, metavar="L",
                   help=f"tokens per window (default: {DEFAULT_WINDOW}, or llm.max_context_len when smaller)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="kernel threads (default: one per physical core)")
    p.add_argument("--mmap", action="store_true",
                   help="map the file instead of reading it into huge-page memory (faster load, slower steps)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--record", action="store_true",
                   help="store the results in FILE's eval.* metadata (shown by `ember inspect`)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
