"""A .ember LLM file as a scorer: logits at chosen positions of a token sequence (numpy, no torch).

The file's `forward(tokens int64[1, T], input_pos int64[1])` takes T in [1, llm.max_seq_len] and
returns every position's logits ([1, T, vocab], files exported with logits="all") or only the last
one's ([1, vocab], logits="last", the default for generation). With "last" the positions that need
logits are fed one token per call; the context before them is still prefilled in chunks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.evals.corpus import DEFAULT_WINDOW
from ember.evals.errors import EvalError
from ember.llm.config import LogitsMode

__all__ = ["FileModel"]

Progress = Callable[[int], Any]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class FileModel:
    """Runs one .ember LLM through ember.runtime and returns float32 logits as numpy arrays.

    Consecutive calls reuse the K/V of the longest common prefix with the previous sequence (the
    cache slots past it are rewritten before they are read), so scoring several continuations of
    one context prefills the context once. `reset()` forgets it and zeroes the KV cache.
    """

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None, mmap: bool = False) -> None:
        """mmap=False (default) reads the weights into huge-page memory (faster steps, as for
        generation); True maps the file (instant load, weights shared with other processes)."""
        import ember.runtime

        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise EvalError(f"no such file: '{self.path}'; pass a .ember file made by `ember export`")
        if threads is not None:
            if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
                raise EvalError(f"threads must be None (one per physical core) or an int >= 1, got {threads!r}")
            ember.runtime.set_num_threads(threads)
        self.program = ember.runtime.load(self.path, mmap=mmap)
        self.metadata: dict[str, Any] = self.program.metadata
        if "forward" not in self.program.methods or "llm.max_seq_len" not in self.metadata:
            raise EvalError(
                f"'{self.path}' is not an LLM file (no forward method or llm.* metadata); "
                "export one with `ember export`")
        self.max_seq_len = int(self.metadata["llm.max_seq_len"])
        self.max_context_len = int(self.metadata["llm.max_context_len"])
        self.vocab_size = int(self.metadata["llm.vocab_size"])
        self.logits_mode = LogitsMode.parse(str(self.metadata.get("llm.logits", LogitsMode.LAST.value)))
        self._tokenizer: Any = None
        self._cached: list[int] = []  # ids whose K/V are in the cache, from position 0

    # --- tokenizer ------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        """The file's own tokenizer (ember.llm.tokenizer.Tokenizer)."""
        if self._tokenizer is None:
            from ember.llm.tokenizer import Tokenizer

            kind, data = self.metadata.get("tokenizer.kind"), self.metadata.get("tokenizer.data")
            if kind is None or data is None:
                raise EvalError(f"'{self.path}' has no tokenizer (tokenizer.* metadata); re-export it with one")
            self._tokenizer = Tokenizer.from_metadata(kind, data, self.metadata.get("tokenizer.config") or "{}")
        return self._tokenizer

    @property
    def bos_prefix(self) -> int | None:
        """The BOS id when the tokenizer puts one before text (then windows start with it), else None."""
        tok = self.tokenizer
        if tok.bos_id is None:
            return None
        with_special = tok.encode("a", add_special_tokens=True)
        return tok.bos_id if with_special and with_special[0] == tok.bos_id else None

    def default_window(self) -> int:
        return min(DEFAULT_WINDOW, self.max_context_len)

    def check_window(self, window: int | None) -> int:
        if window is None:
            return self.default_window()
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise EvalError(f"window must be an int >= 2 (one prediction needs two tokens), got {window!r}")
        if window > self.max_context_len:
            raise EvalError(
                f"window {window} is larger than the file's context (llm.max_context_len = {self.max_context_len}); "
                f"pass --window {self.max_context_len} or less, or re-export with a larger --max-context-len")
        return window

    # --- running --------------------------------------------------------------------------
    def reset(self) -> None:
        self.program.reset_state()
        self._cached = []

    def _run(self, ids: Sequence[int], pos: int) -> np.ndarray:
        tokens = np.asarray([ids], dtype=np.int64)  # [1, T]
        input_pos = np.asarray([pos], dtype=np.int64)  # [1]
        (out,) = self.program.run("forward", tokens, input_pos)
        return out  # [1, T, vocab] (all) or [1, vocab] (last)

    def logits(self, ids: Sequence[int], start: int = 0, progress: Progress | None = None) -> np.ndarray:
        """float32 [len(ids) - start, vocab]: the logits at positions start..len(ids)-1 of `ids`
        placed at positions 0.. of the context (row i predicts ids[start + i + 1])."""
        ids = [int(t) for t in ids]
        n = len(ids)
        if not 0 <= start < n:
            raise EvalError(f"start {start} must index one of the {n} ids")
        if n > self.max_context_len:
            raise EvalError(
                f"{n} tokens do not fit the file's context (llm.max_context_len = {self.max_context_len})")
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise EvalError(f"token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        first = min(_common_prefix(self._cached, ids), start)  # first position fed to the file
        self._cached = ids[:first]  # a failure below leaves only this prefix valid
        step = self.max_seq_len
        rows: list[np.ndarray] = []
        if self.logits_mode is LogitsMode.ALL:
            for s in range(first, n, step):
                out = self._run(ids[s:s + step], s)
                rows.append(out[0])
                if progress is not None:
                    progress(out.shape[1])
            result = np.concatenate(rows, axis=0)[start - first:]
        else:
            # Prefill up to `start` in chunks: the last chunk's output is position start's logits.
            for s in range(first, start + 1, step):
                out = self._run(ids[s:min(s + step, start + 1)], s)
                if progress is not None:
                    progress(min(s + step, start + 1) - s)
            rows.append(out[0])
            for pos in range(start + 1, n):
                rows.append(self._run(ids[pos:pos + 1], pos)[0])
                if progress is not None:
                    progress(1)
            result = np.stack(rows, axis=0)
        self._cached = ids
        return np.ascontiguousarray(result, dtype=np.float32)

    def __repr__(self) -> str:
        return f"FileModel({self.path!r}, logits={self.logits_mode.value}, context={self.max_context_len})"
