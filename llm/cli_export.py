"""`ember export SOURCE -o FILE`: a Hugging Face checkpoint folder or .gguf file -> one .ember file."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ember.cli import fail


def run(args: argparse.Namespace) -> int:
    from ember.quant.cli_args import recipe_from_args

    from ember.llm.source_check import SourceError, check_source_path

    try:
        quant = recipe_from_args(args)  # a bad recipe or source fails before torch is even imported
        check_source_path(args.source)
    except SourceError as exc:
        return fail("export", exc, 1)
    except ValueError as exc:
        return fail("export", exc, 2)
    if args.quiet:
        # "no progress bars" includes the ones third parties draw with plain tqdm (transformers' GGUF
        # dequantization); tqdm reads its defaults from TQDM_* variables when it is imported
        os.environ["TQDM_DISABLE"] = "1"
    if not args.verbose:
        from ember.llm.quiet_imports import silence_third_party_noise

        silence_third_party_noise()
    from ember.llm.exporter import export_llm

    try:
        export_llm(args.source, args.output, max_context_len=args.max_context_len, max_seq_len=args.max_seq_len,
                   dtype=args.dtype, quant=quant, backend=args.backend, logits=args.logits, progress=not args.quiet,
                   qactivations=args.qactivations, kv_dtype=args.kv_dtype)
    except (SourceError, ValueError, FileNotFoundError) as exc:
        return fail("export", exc, 1)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="export a Hugging Face checkpoint or GGUF file to a .ember program",
        description="Load a local Hugging Face checkpoint folder (config.json, safetensors, tokenizer, chat "
                    "template) or a .gguf file, export it with a static KV cache, lower it and write one "
                    "self-contained .ember file (weights, tokenizer, chat template and metadata inside).")
    p.add_argument("source", help="checkpoint folder or .gguf file")
    p.add_argument("-o", "--output", help="output file (default: <source name>.ember in the current folder)")
    p.add_argument("--max-context-len", type=int, default=2048,
                   help="KV cache length: prompt + generated tokens (default: 2048)")
    p.add_argument("--max-seq-len", type=int, default=128,
                   help="most tokens one forward call takes, i.e. the prefill chunk (default: 128)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="weight and activation dtype (default: float32)")
    p.add_argument("--kv-dtype", default="auto", choices=["auto", "fp32", "fp16", "int8"],
                   help="what the KV cache stores: 'auto' (default) the activations' dtype; 'fp16' half the bytes; "
                        "'int8' codes with one scale per token and head, about a quarter: at long context the cache, "
                        "not the weights, is most of what a quantized decode step reads")
    p.add_argument("--backend", default="auto",
                   help="delegate backend: 'auto' (default) takes 'cpu' for quantized exports (weights packed for "
                        "the CPU's int8 kernels) and the portable kernels for full precision; 'portable' opts out; "
                        "or a backend name ('cpu', 'reference')")
    p.add_argument("--logits", default="last", choices=["last", "all"],
                   help="'last': logits of the last position (generation); 'all': every position (evals)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or summary")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show the warnings and progress bars of torch, torchao and transformers (hidden by default)")
    from ember.quant.cli_args import add_quant_arguments

    add_quant_arguments(p)
    p.set_defaults(func=run)
