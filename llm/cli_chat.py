"""`ember chat`: a streaming multi-turn chat REPL over a .ember LLM's chat template."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ember.cli import fail
from ember.llm.cli_generate import add_model_arguments, add_sampling_arguments, check_arguments, context_full_note, open_model

HELP = "commands: /reset (new conversation), /stats (last answer's timings), /exit (or Ctrl-D); Ctrl-C stops an answer"


def _read(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None


def run(args: argparse.Namespace) -> int:
    try:
        settings = check_arguments(args)  # before loading (or exporting the default model)
    except ValueError as error:
        return fail("chat", error, 2)
    try:
        llm = open_model(args)
    except (ValueError, OSError, RuntimeError) as error:
        return fail("chat", error, 1)
    interactive = sys.stdin.isatty()
    system = [{"role": "system", "content": args.system}] if args.system else []
    messages: list[dict[str, str]] = list(system)
    if interactive:
        print(f"ember chat with {llm.path} — {HELP}", file=sys.stderr)
    while True:
        try:
            line = _read(">>> " if interactive else "")
        except KeyboardInterrupt:
            print("\n(/exit or Ctrl-D quits)", file=sys.stderr)
            continue
        if line is None:
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            break
        if text == "/reset":
            messages = list(system)
            llm.reset()
            print("(new conversation)", file=sys.stderr)
            continue
        if text == "/stats":
            print(f"[{llm.stats.summary()}]", file=sys.stderr)
            continue
        if text in ("/help", "/?"):
            print(HELP, file=sys.stderr)
            continue
        messages.append({"role": "user", "content": text})
        answer: list[str] = []
        try:
            for piece in llm.chat(messages, stream=True, **settings):
                answer.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            sys.stdout.write(" [stopped]")
        except (ValueError, RuntimeError) as error:
            messages.pop()
            print(f"\nember chat: error: {error}", file=sys.stderr)
            if "context" in str(error):
                print("(the conversation no longer fits the context: /reset starts a new one)", file=sys.stderr)
            continue
        sys.stdout.write("\n")
        sys.stdout.flush()
        messages.append({"role": "assistant", "content": "".join(answer)})
        note = context_full_note(llm)
        if note:
            print(f"{note} (/reset starts a new conversation)", file=sys.stderr)
        if args.stats:
            print(f"[{llm.stats.summary()}]", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "chat",
        help="chat with a .ember LLM (streaming, multi-turn)",
        description="Chat with a .ember LLM using the chat template stored in the file. Each turn reuses the "
                    "KV cache of the conversation so far and computes only the new message. "
                    "Without FILE, uses SmolLM2-135M-Instruct (exported once into the cache).\n\n" + HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    parser.add_argument("--system", default=None, metavar="TEXT", help="a system prompt for the conversation")
    parser.add_argument("--stats", action="store_true", help="print timings after every answer (stderr)")
    add_sampling_arguments(parser)
    parser.set_defaults(func=run)
