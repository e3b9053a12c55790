"""What a CPU-delegate blob holds, for `ember inspect` (reads the "ECW1" header; no torch needed)."""

from __future__ import annotations

import struct

from ember.export.backend import BlobWeight

_HEADER = struct.Struct("<4s9Iqqff")  # backends/cpu/packing.py documents the layout
_TYPE_NAMES = {0: "float32", 1: "float16", 2: "bfloat16", 3: "int8"}


def describe_blob(blob: bytes, specs: dict[str, bytes]) -> BlobWeight | None:
    if len(blob) < _HEADER.size:
        return None
    magic, _, bits, st, zk, zt, ok, ot, _, gs, n, k, _, _ = _HEADER.unpack_from(blob, 0)
    if magic != b"ECW1":
        return None
    fmt = f"int{bits} {'per-channel' if gs == k else f'g{gs}'} {_TYPE_NAMES.get(st, '?')} scale"
    if zk:
        fmt += f" +{_TYPE_NAMES.get(zt, '?') if zk == 2 else 'one'} zero point"
    if ok:
        fmt += f" +{_TYPE_NAMES.get(ot, '?') if ok == 2 else 'one'} offset"
    fmt += ", packed for ember.cpu"
    name = specs.get("weight", b"").decode("utf-8", "replace")
    return BlobWeight(name, (n, k), fmt, len(blob))
