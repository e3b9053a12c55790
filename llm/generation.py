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
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GenerationConfig"]

_MAX_SEED = 2**64
_INT32_MAX = 2**31 - 1   # top_k and penalty_window are int32 in the C++ sampler
_INT64_MAX = 2**63 - 1   # max_new_tokens is int64 in the C++ runner
_FLOAT32_MAX = 3.4028234663852886e38
# The C++ sampler works in float32 and divides by the temperature: below float32's smallest
# normal number 1/T overflows to inf and every draw would return the last vocabulary id.
# Such temperatures are greedy in the limit, so they are treated as greedy (temperature 0).
MIN_SAMPLING_TEMPERATURE = 2.0**-126

# generation.* metadata keys written by export_llm -> GenerationConfig fields.
_METADATA_KEYS = {
    "generation.do_sample": "do_sample",
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


def _as_float32(value: float) -> float:
    """`value` rounded to float32 as the C++ sampler will see it (inf when out of range)."""
    if abs(value) > _FLOAT32_MAX:
        return math.copysign(math.inf, value)
    return struct.unpack("f", struct.pack("f", value))[0]


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
        if not _is_int(self.max_new_tokens) or not 1 <= self.max_new_tokens <= _INT64_MAX:
            raise _bad("max_new_tokens", self.max_new_tokens, "an int in [1, 2**63)")
        for name in ("temperature", "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if not _is_number(value):
                raise _bad(name, value, "a finite number")
            try:
                number = float(value)
            except OverflowError:  # an int beyond float's range
                raise _bad(name, value, f"a finite number of at most {_FLOAT32_MAX:.4g} (the sampler uses float32)") from None
            if not math.isfinite(_as_float32(number)):
                raise _bad(name, value, f"a finite number of at most {_FLOAT32_MAX:.4g} (the sampler uses float32)")
            object.__setattr__(self, name, number)
        if self.temperature < 0:
            raise _bad("temperature", self.temperature, ">= 0 (0 = greedy)")
        if not _is_int(self.top_k) or not 0 <= self.top_k <= _INT32_MAX:
            raise _bad("top_k", self.top_k, "an int in [0, 2**31) (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise _bad("top_p", self.top_p, "in (0, 1] (1 = off)")
        if _as_float32(self.top_p) == 0.0:
            raise _bad("top_p", self.top_p, "at least 1e-38 (the sampler uses float32, where this is 0)")
        if not 0.0 <= self.min_p < 1.0:
            raise _bad("min_p", self.min_p, "in [0, 1) (0 = off)")
        if _as_float32(self.min_p) >= 1.0:
            raise _bad("min_p", self.min_p, "below 1 in float32 (the sampler's type), i.e. at most 0.99999994")
        if self.repetition_penalty <= 0 or _as_float32(self.repetition_penalty) == 0.0:
            raise _bad("repetition_penalty", self.repetition_penalty, "> 0 and at least 1e-38 (1 = off)")
        if not _is_int(self.penalty_window) or not 0 <= self.penalty_window <= _INT32_MAX:
            raise _bad("penalty_window", self.penalty_window, "an int in [0, 2**31) (0 = the whole context)")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < _MAX_SEED):
            raise _bad("seed", self.seed, "None or an int in [0, 2**64)")
        object.__setattr__(self, "stop", _stop_strings(self.stop))
        if not isinstance(self.ignore_eos, bool):
            raise _bad("ignore_eos", self.ignore_eos, "a bool")

    @property
    def greedy(self) -> bool:
        """True when the most likely token is picked: temperature 0, or one so small (below float32's
        smallest normal number, MIN_SAMPLING_TEMPERATURE) that sampling at it is greedy in the limit."""
        return self.temperature < MIN_SAMPLING_TEMPERATURE

    @property
    def sampler_temperature(self) -> float:
        """The temperature handed to the C++ sampler: 0.0 when `greedy`, else `temperature`."""
        return 0.0 if self.greedy else self.temperature

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
        """Defaults from a program's ``generation.*`` metadata (when present), then `overrides`.

        ``generation.do_sample = False`` (transformers: greedy whatever the temperature) makes
        the defaults greedy: the file's temperature is then not used."""
        values: dict[str, Any] = {}
        for key, name in _METADATA_KEYS.items():
            if key in metadata and metadata[key] is not None:
                value = metadata[key]
                if name == "do_sample":
                    values[name] = bool(value)
                else:
                    values[name] = int(value) if name in ("top_k", "max_new_tokens") else float(value)
        if values.pop("do_sample", True) is False:
            values["temperature"] = 0.0
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
