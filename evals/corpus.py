"""The text an evaluation reads: a named, hashed corpus, cut into fixed windows of token ids."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.evals.errors import EvalError

__all__ = ["BUNDLED_CORPUS", "DEFAULT_TOKENS", "DEFAULT_WINDOW", "Corpus", "corpus_windows"]

# Public-domain English prose shipped with ember, so an eval needs nothing outside the package.
BUNDLED_CORPUS = Path(__file__).resolve().parent / "data" / "pride_and_prejudice.txt"

DEFAULT_TOKENS = 4096  # tokens evaluated, in whole windows
DEFAULT_WINDOW = 512  # tokens per window, unless the file's context is shorter

_CHARS_PER_TOKEN_GUESS = 6  # first guess of how much text to tokenize; doubled until enough
_BOUNDARY_MARGIN = 16  # tokens past the cut that are dropped: the cut may split a word


@dataclass(frozen=True)
class Corpus:
    name: str
    text: str
    sha256: str  # hex digest of the UTF-8 text

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "Corpus":
        p = Path(path)
        if not p.is_file():
            raise EvalError(f"corpus file not found: '{p}'; pass a UTF-8 text file (ember eval --text FILE)")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise EvalError(f"corpus file '{p}' is not UTF-8 text ({error}); pass a UTF-8 text file") from None
        return cls.from_text(text, name=p.name)

    @classmethod
    def from_text(cls, text: str, name: str = "<text>") -> "Corpus":
        if not isinstance(text, str) or not text.strip():
            raise EvalError(f"corpus '{name}' is empty; pass some text to evaluate on")
        return cls(name=name, text=text, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())

    @property
    def label(self) -> str:
        """What results record: the name and a hash prefix, so two runs on different text never compare."""
        return f"{self.name} (sha256 {self.sha256[:12]})"


def _tokenize_prefix(tokenizer: Any, text: str, n_tokens: int) -> list[int]:
    """The first n_tokens ids of `text` without tokenizing all of it (a book is ~200k tokens)."""
    chars = max(1024, n_tokens * _CHARS_PER_TOKEN_GUESS)
    while True:
        ids = tokenizer.encode(text[:chars], add_special_tokens=False)
        if chars >= len(text):
            return ids[:n_tokens]
        if len(ids) >= n_tokens + _BOUNDARY_MARGIN:
            return ids[:n_tokens]
        chars *= 2


def corpus_windows(corpus: Corpus, tokenizer: Any, window: int, n_windows: int,
                   bos_id: int | None) -> list[list[int]]:
    """Up to n_windows consecutive, non-overlapping windows of `window` ids each. With a BOS id
    (the model's tokenizer prepends one), every window is BOS + window-1 corpus tokens, as the model
    saw text in training; its first prediction is then the window's first corpus token."""
    per_window = window - (1 if bos_id is not None else 0)
    ids = _tokenize_prefix(tokenizer, corpus.text, n_windows * per_window)
    available = len(ids) // per_window
    if available == 0:
        raise EvalError(
            f"corpus {corpus.label} has only {len(ids)} tokens, fewer than one window of {window}; "
            "pass a longer text or a smaller --window")
    prefix = [bos_id] if bos_id is not None else []
    return [prefix + ids[i * per_window:(i + 1) * per_window] for i in range(min(n_windows, available))]
