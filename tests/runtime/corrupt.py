"""Deterministic corruptions of a valid .ember file: truncations, bit flips, header/offset edits."""

from __future__ import annotations

import random
import struct

HEADER_FIELDS = [(8, "I"), (12, "I"), (16, "Q"), (24, "Q"), (32, "Q"), (40, "Q")]


def truncations(data: bytes, n: int, rng: random.Random) -> list[bytes]:
    cuts = {0, 1, 7, 63, 64, len(data) - 1}
    while len(cuts) < n:
        cuts.add(rng.randrange(0, len(data)))
    return [data[:c] for c in sorted(cuts)][:n]


def bit_flips(data: bytes, n: int, rng: random.Random, region: tuple[int, int] | None = None) -> list[bytes]:
    lo, hi = region or (0, len(data))
    out = []
    for _ in range(n):
        b = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 4, 8])):
            pos = rng.randrange(lo, hi)
            b[pos] ^= 1 << rng.randrange(8)
        out.append(bytes(b))
    return out


def byte_edits(data: bytes, n: int, rng: random.Random, region: tuple[int, int]) -> list[bytes]:
    """Overwrite 1-8 bytes with random or boundary values (0, 0xff, 0x7f, 0x80)."""
    lo, hi = region
    out = []
    for _ in range(n):
        b = bytearray(data)
        pos = rng.randrange(lo, hi)
        width = rng.choice([1, 2, 4, 8])
        val = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        for k in range(width):
            if pos + k < hi:
                b[pos + k] = val if rng.random() < 0.7 else rng.randrange(256)
        out.append(bytes(b))
    return out


def header_edits(data: bytes, n: int, rng: random.Random) -> list[bytes]:
    specials = [0, 1, 8, 63, 64, len(data) - 1, len(data), len(data) + 1, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1]
    out = []
    for _ in range(n):
        b = bytearray(data)
        off, kind = rng.choice(HEADER_FIELDS)
        limit = 2**32 - 1 if kind == "I" else 2**64 - 1
        val = rng.choice(specials + [rng.randrange(0, len(data) * 2)]) & limit
        struct.pack_into("<" + kind, b, off, val)
        if rng.random() < 0.2:
            b[rng.randrange(0, 8)] ^= 0xFF  # also break the magic sometimes
        out.append(bytes(b))
    return out


def corpus(data: bytes, seed: int = 0) -> list[tuple[str, bytes]]:
    """1,200 corrupted variants of `data`, each labelled with how it was made."""
    rng = random.Random(seed)
    fb_offset, fb_size = struct.unpack_from("<QQ", data, 16)
    fb_region = (fb_offset, fb_offset + fb_size)
    items: list[tuple[str, bytes]] = []
    items += [("truncate", d) for d in truncations(data, 150, rng)]
    items += [("flip", d) for d in bit_flips(data, 250, rng)]
    items += [("flip-program", d) for d in bit_flips(data, 400, rng, fb_region)]
    items += [("edit-program", d) for d in byte_edits(data, 250, rng, fb_region)]
    items += [("header", d) for d in header_edits(data, 150, rng)]
    return items
