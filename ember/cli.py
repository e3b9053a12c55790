"""The `ember` command: composes the subcommands that each package registers.

A subcommand module exposes `register(subparsers)`, which adds its parser and sets
`func(args) -> int` as the default. Modules are listed here, imported only when the CLI runs;
each keeps its heavy imports (torch for `export`) inside its `func`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = (
    "ember.llm.cli_export",
    "ember.llm.cli_generate",
    "ember.llm.cli_chat",
    "ember.llm.cli_bench",
    "ember.llm.serve.cli",
    "ember.export.cli_inspect",
    "ember.evals.cli_eval",
)


def fail(command: str, message: object, code: int = 2) -> int:
    """Prints `ember COMMAND: error: MESSAGE` to stderr (argparse's form, for every subcommand's
    errors) and returns `code`: 2 for a bad argument or input, 1 for a failure while running."""
    print(f"ember {command}: error: {message}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    from ember import __version__

    parser = argparse.ArgumentParser(
        prog="ember",
        description="Export Hugging Face LLMs to one .ember file and run them on ember's C++ runtime.")
    parser.add_argument("--version", action="version", version=f"ember {__version__}")
    parser.set_defaults(func=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.func is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
