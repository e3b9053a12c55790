"""Greedy best-fit placement of activation tensors into one arena per method.

Each planned tensor has a size (at its upper bound) and a lifetime [first, last] in instruction
indices; two tensors may share bytes only if their lifetimes do not overlap. Tensors are placed
largest first, each into the smallest gap left between the already-placed tensors it overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64


@dataclass
class Buffer:
    key: int        # caller's id (value index)
    size: int       # bytes
    first: int      # instruction that writes it
    last: int       # last instruction that reads it
    offset: int = -1


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan(buffers: list[Buffer]) -> int:
    """Assigns `offset` to every buffer; returns the arena size in bytes."""
    placed: list[Buffer] = []
    total = 0
    for b in sorted(buffers, key=lambda b: (-b.size, b.first, b.key)):
        size = _align(max(b.size, 1))
        live = sorted((p for p in placed if p.first <= b.last and b.first <= p.last), key=lambda p: p.offset)
        best, best_gap, cursor = None, None, 0
        for p in live:
            gap = p.offset - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, p.offset + _align(max(p.size, 1)))
        b.offset = best if best is not None else cursor
        placed.append(b)
        total = max(total, b.offset + size)
    return total


def check(buffers: list[Buffer]) -> None:
    """Asserts that no two simultaneously live buffers overlap (used by tests)."""
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                if a.offset < b.offset + b.size and b.offset < a.offset + a.size:
                    raise AssertionError(f"buffers {a.key} and {b.key} overlap while both live")
