"""Typed, validated generation settings (pure Python: no torch, no native module).

    cfg = GenerationConfig(max_new_tokens=64, temperature=0.7, top_p=0.9, seed=1)
    cfg = cfg.replace(temperature=0.0)            # validated again
    cfg = GenerationConfig.from_metadata(program_metadata)   # the file's generation.* defaults

The sampler chain applies, in order: repetition / frequency / presence penalties over the last
``penalty_window`` context tokens, temperature (0 = greedy), top-k, top-p, min-p, then a
seeded draw. See runners/include/ember/runners/sampler.h for the exact semantics.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GenerationConfig"]

_MAX_SEED = 2**64

# generation.* metadata keys written by export_llm -> GenerationConfig fields.
_METADATA_KEYS = {
    "generation.temperature": "temperature",
    "generation.top_p": "top_p",
    "generation.top_k": "top_k",
    "generation.repetition_penalty": "repetition_penalty",
    "generation.min_p": "min_p",
    "generation.max_new_tokens": "max_new_tokens",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class GenerationConfig:
    """How to generate. Every field is checked on construction; a bad value raises ValueError
    naming the field, the value and the allowed range."""

    max_new_tokens: int = 256
    """Most tokens to generate (>= 1). Generation also ends at EOS, a stop string or context end."""
    temperature: float = 0.0
    """>= 0. 0 picks the most likely token (greedy, deterministic); higher is more random."""
    top_k: int = 0
    """Keep only the k most likely tokens (>= 0; 0 = off)."""
    top_p: float = 1.0
    """Keep the smallest set of most likely tokens whose probability reaches top_p ((0, 1]; 1 = off)."""
    min_p: float = 0.0
    """Drop tokens less likely than min_p x the most likely one ([0, 1); 0 = off)."""
    repetition_penalty: float = 1.0
    """> 0; > 1 discourages tokens already in the window (positive logits divided, negative multiplied)."""
    frequency_penalty: float = 0.0
    """Subtracted from a token's logit once per occurrence in the window (0 = off)."""
    presence_penalty: float = 0.0
    """Subtracted once from the logit of every token that occurs in the window (0 = off)."""
    penalty_window: int = 64
    """How many most recent context tokens (prompt + generated) the penalties see (>= 0; 0 = all)."""
    seed: int | None = None
    """Seed of the draw (0 <= seed < 2**64): same seed, same tokens. None: a fresh random seed per call."""
    stop: tuple[str, ...] = field(default=())
    """Strings that end generation; the returned text stops right before the first one."""
    ignore_eos: bool = False
    """Keep generating past the model's end-of-sequence tokens (benchmarks)."""

    def __post_init__(self) -> None:
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise _bad("max_new_tokens", self.max_new_tokens, "an int >= 1")
        for name in ("temperature", "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value):
                raise _bad(name, value, "a finite number")
            object.__setattr__(self, name, float(value))
        if self.temperature < 0:
            raise _bad("temperature", self.temperature, ">= 0 (0 = greedy)")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise _bad("top_k", self.top_k, "an int >= 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise _bad("top_p", self.top_p, "in (0, 1] (1 = off)")
        if not 0.0 <= self.min_p < 1.0:
            raise _bad("min_p", self.min_p, "in [0, 1) (0 = off)")
        if self.repetition_penalty <= 0:
            raise _bad("repetition_penalty", self.repetition_penalty, "> 0 (1 = off)")
        if not _is_int(self.penalty_window) or self.penalty_window < 0:
            raise _bad("penalty_window", self.penalty_window, "an int >= 0 (0 = the whole context)")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < _MAX_SEED):
            raise _bad("seed", self.seed, "None or an int in [0, 2**64)")
        object.__setattr__(self, "stop", _stop_strings(self.stop))
        if not isinstance(self.ignore_eos, bool):
            raise _bad("ignore_eos", self.ignore_eos, "a bool")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def replace(self, **changes: Any) -> "GenerationConfig":
        """A copy with `changes` applied (None values are ignored), validated again."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"unknown generation setting(s) {unknown}; known: {[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def resolved_seed(self) -> int:
        """The seed to use for one call: `seed`, or a fresh random one when it is None."""
        return self.seed if self.seed is not None else secrets.randbits(63)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], **overrides: Any) -> "GenerationConfig":
        """Defaults from a program's ``generation.*`` metadata (when present), then `overrides`."""
        values: dict[str, Any] = {}
        for key, name in _METADATA_KEYS.items():
            if key in metadata and metadata[key] is not None:
                value = metadata[key]
                values[name] = int(value) if name in ("top_k", "max_new_tokens") else float(value)
        return cls().replace(**values).replace(**overrides)


def _bad(name: str, value: Any, expected: str) -> Exception:
    return ValueError(f"GenerationConfig.{name} must be {expected}, got {value!r}")


def _stop_strings(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, Iterable):
        raise TypeError(f"GenerationConfig.stop must be a string or a list of strings, got {stop!r}")
    out = tuple(stop)
    for s in out:
        if not isinstance(s, str) or not s:
            raise ValueError(f"GenerationConfig.stop must hold non-empty strings, got {s!r} in {list(out)!r}")
    return out
