"""The one exception type of ember.evals: a bad input, with what was wrong and what to do."""

from __future__ import annotations

__all__ = ["EvalError"]


class EvalError(ValueError):
    """An evaluation cannot run as asked (missing corpus, window too large, ...); the message says why."""
