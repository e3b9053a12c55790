"""Field map of the reference delegate's blob (layout: backends/reference/partitioner.py)."""

from __future__ import annotations

import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    offset: int   # byte offset in the blob
    fmt: str      # struct format: "I" (u32), "Q" (u64), "q" (i64)
    role: str     # "count", "rank", "size", "numel", "opcode", "nrefs", "kind", "index", "out", "output"


def fields(blob: bytes) -> list[Field]:
    """Every integer field of a well-formed ERF1 blob, in order; [] if the blob does not parse."""
    try:
        return _walk(blob)
    except (struct.error, ValueError):
        return []


def _walk(blob: bytes) -> list[Field]:
    if blob[:4] != b"ERF1":
        raise ValueError("magic")
    out = [Field(4 + 4 * k, "I", "count") for k in range(5)]
    _, nvalues, nconsts, nops, nouts = struct.unpack_from("<5I", blob, 4)
    pos = 24
    for _ in range(nconsts):
        (rank,) = struct.unpack_from("<I", blob, pos)
        out.append(Field(pos, "I", "rank"))
        pos += 4
        numel = 1
        for _ in range(rank):
            (s,) = struct.unpack_from("<q", blob, pos)
            out.append(Field(pos, "q", "size"))
            numel *= s
            pos += 8
        pos += 4 * numel
    for _ in range(nvalues):
        out.append(Field(pos, "Q", "numel"))
        pos += 8
    for _ in range(nops):
        _, nrefs = struct.unpack_from("<II", blob, pos)
        out += [Field(pos, "I", "opcode"), Field(pos + 4, "I", "nrefs")]
        pos += 8
        for _ in range(nrefs):
            out += [Field(pos, "I", "kind"), Field(pos + 4, "I", "index")]
            pos += 8
        out.append(Field(pos, "I", "out"))
        pos += 4
    for _ in range(nouts):
        out.append(Field(pos, "I", "output"))
        pos += 4
    if pos != len(blob):
        raise ValueError("length")
    return out


def with_field(blob: bytes, field: Field, value: int) -> bytes:
    """`blob` with `field` set to `value` (wrapped to the field's width)."""
    bits = struct.calcsize(field.fmt) * 8
    value &= (1 << bits) - 1
    if field.fmt == "q" and value >= 1 << 63:
        value -= 1 << 64
    b = bytearray(blob)
    struct.pack_into("<" + field.fmt, b, field.offset, value)
    return bytes(b)
