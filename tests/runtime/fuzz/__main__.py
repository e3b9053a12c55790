"""python -m tests.runtime.fuzz SEED.ember [--count N] [--llm] ...: fuzz one seed file.

Prints one JSON line: {"counts": {...}, "failures": [[index, outcome, ops], ...], "seconds": s}.
Failing mutants are written to --save DIR (as .ember files) for `ember_run_file` and a debugger;
--patches FILE writes every mutant as a patch file, and the seed they patch as FILE.seed, for
`ember_run_file --patched FILE.seed FILE` (the sanitizer run). Imports ember but not torch, and runs no kernel before forking.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tests.runtime.fuzz.harness import fuzz, write_corpus
from tests.runtime.fuzz.mutate import with_all_fields


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.runtime.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("seed", help="a valid .ember file to mutate")
    ap.add_argument("--count", type=int, default=10000, help="mutants to run (default 10000)")
    ap.add_argument("--salt", type=int, default=0, help="selects another deterministic sequence of mutants")
    ap.add_argument("--llm", action="store_true", help="also drive each mutant through the text runner")
    ap.add_argument("--api", action="store_true",
                    help="drive each mutant through the Python API instead (ember.load, generate, chat)")
    ap.add_argument("--jobs", type=int, default=None, help="children at a time (default: the usable CPUs)")
    ap.add_argument("--address-space-mb", type=int, default=1024, help="address space each child may add")
    ap.add_argument("--memory-limit-mb", type=int, default=256, help="ember's memory limit in each child")
    ap.add_argument("--timeout", type=int, default=20, help="seconds before a mutant counts as hung")
    ap.add_argument("--batch", type=int, default=16, help="mutants per forked child (default 16)")
    ap.add_argument("--save", metavar="DIR", help="write failing mutants here")
    ap.add_argument("--patches", metavar="FILE", help="write all mutants as a patch file and exit")
    args = ap.parse_args(argv)
    with open(args.seed, "rb") as f:
        seed = f.read()
    if args.patches:
        write_corpus(seed, args.count, args.patches, args.salt)
        return 0

    base = with_all_fields(seed)  # what fuzz() mutates

    def save(index: int, mutant, outcome: str) -> None:  # noqa: ANN001
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            with open(os.path.join(args.save, f"mutant-{args.salt}-{index}.ember"), "wb") as out:
                out.write(mutant.apply(base))
        print(f"mutant {index}: {outcome}: {'; '.join(mutant.ops)}", file=sys.stderr)

    report = fuzz(seed, args.count, llm=args.llm, api=args.api, salt=args.salt, jobs=args.jobs,
                  address_space=args.address_space_mb << 20, memory_limit=args.memory_limit_mb << 20,
                  timeout=args.timeout, batch=args.batch, on_failure=save)
    print(json.dumps({"counts": report.counts, "failures": report.failures, "seconds": round(report.seconds, 1)}))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
