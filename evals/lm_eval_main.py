"""`python -m ember.evals.lm_eval_main ARGS`: lm-eval's command line with the "ember" model registered.

Takes exactly lm-eval's arguments, e.g.

    python -m ember.evals.lm_eval_main --model ember --model_args path=smol.ember \\
        --tasks ember_tiny --include_path tests/evals/data
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError as error:
        raise SystemExit(f"lm-eval is not installed ({error}); pip install 'ember[eval]' (or lm-eval)") from None
    import ember.evals.lm_eval_adapter  # noqa: F401  (registers the "ember" model)

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
