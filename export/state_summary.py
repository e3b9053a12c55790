"""Program state (the KV cache) described in a line or two, not one line per tensor.

A 30-layer model has 60 cache tensors of one dtype and shape; they are grouped by (dtype, shape)
and their names compressed to ranges in natural order ("k_cache_0..29, v_cache_0..29").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import groupby
from math import prod
from typing import Callable

__all__ = ["StateTensor", "state_lines", "compress_names"]

_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int8": 1, "uint8": 1, "bool": 1}
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class StateTensor:
    name: str
    dtype: str  # "float32", ...
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * _ELEMENT_BYTES.get(self.dtype, 1)


def _natural_key(name: str) -> tuple[str, int]:
    match = _NUMBERED.match(name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)


def compress_names(names: list[str]) -> str:
    """['k_cache_0', 'k_cache_1', 'k_cache_2', 'v_cache_0'] -> 'k_cache_0..2, v_cache_0'."""
    parts = []
    for prefix, group in groupby(sorted(names, key=_natural_key), key=lambda n: _natural_key(n)[0]):
        numbers = [_natural_key(n)[1] for n in group]
        if numbers == [-1]:
            parts.append(prefix)
            continue
        run_start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            parts.append(f"{prefix}{run_start}" if run_start == prev else f"{prefix}{run_start}..{prev}")
            if n is not None:
                run_start = prev = n
    return ", ".join(parts)


def state_lines(tensors: list[StateTensor], human: Callable[[float], str]) -> list[str]:
    """One line per (dtype, shape) group plus a total when there are several groups."""
    if not tensors:
        return []
    groups: dict[tuple[str, tuple[int, ...]], list[StateTensor]] = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.shape), []).append(t)
    total = sum(t.nbytes for t in tensors)
    lines = []
    for (dtype, shape), members in groups.items():
        size = sum(t.nbytes for t in members)
        each = " each" if len(members) > 1 else ""
        count = f"{len(members)} tensors" if len(members) > 1 else "1 tensor"
        lines.append(f"state: {count} ({compress_names([t.name for t in members])}), "
                     f"{dtype}{list(shape)}{each}, {human(size)}")
    if len(groups) > 1:
        lines.append(f"state total: {len(tensors)} tensors, {human(total)}")
    return lines
