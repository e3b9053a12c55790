"""Structure-aware mutations of a .ember file, as byte patches on the valid file.

A mutant is `Mutant(patches, size)`: write each (offset, bytes) into a copy of the seed, then
cut or pad it to `size`. Patches come from the field map (fieldmap.py) and the reference
delegate's blob layout (erf1.py), so most mutants pass the flatbuffer verifier and reach the
loader's semantic checks, the kernels and the runner:

- scalar fields (dtype, storage, offsets, nbytes, sizes, indices, arena size) set to boundary
  values or to a neighbour of their value;
- vector lengths (strings too) shortened, lengthened or set to extremes;
- vector elements (inputs, outputs, args, list items, sizes) pointed at other values;
- union tags swapped (a Tensor read as an Int, a KernelCall as a CopyCall);
- two table offsets in one vector swapped or one duplicated: instructions reordered (a reader
  before its producer), values exchanged;
- table/vector offsets nudged;
- reference-delegate blob fields (counts, ranks, sizes, value sizes, opcodes, operand kinds and
  indices, outputs);
- LLM metadata values (llm.vocab_size, llm.max_context_len, llm.max_seq_len, eos ids);
- raw bit flips and truncation, a small share.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

from tests.runtime.fuzz import erf1
from tests.runtime.fuzz.fieldmap import Field, field_map

_INTERESTING = [0, 1, 2, 3, 4, 7, 8, 15, 16, 63, 64, 255, 256, 4095, 4096, 65535, 65536, 2**20, 2**27, 2**29, 2**31 - 1,
                2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**64 - 1, -1, -2, -(2**31), -(2**63)]


@dataclass
class Mutant:
    patches: list[tuple[int, bytes]] = field(default_factory=list)
    size: int = 0
    ops: list[str] = field(default_factory=list)   # what was done, for reports

    def apply(self, seed: bytes) -> bytes:
        b = bytearray(seed)
        for off, data in self.patches:
            b[off: off + len(data)] = data
        if self.size < len(b):
            del b[self.size:]
        return bytes(b)

    def encode(self) -> bytes:
        """The record ember_run_file --patched reads: u64 size, u32 n, n * (u64 offset, u32 len, bytes)."""
        out = [struct.pack("<QI", self.size, len(self.patches))]
        for off, data in self.patches:
            out.append(struct.pack("<QI", off, len(data)) + data)
        return b"".join(out)


def _pack(fmt: str, value: int | float) -> bytes:
    if fmt == "d":
        return struct.pack("<d", float(value))
    bits = struct.calcsize(fmt) * 8
    value = int(value) & ((1 << bits) - 1)
    if fmt.islower() and value >= 1 << (bits - 1):
        value -= 1 << bits
    return struct.pack("<" + fmt, value)


def with_all_fields(data: bytes) -> bytes:
    """`data` repacked with every scalar field written, defaults included: a flatbuffer omits a
    field at its default (storage Arena, offset 0, dtype float32...), and an absent field cannot
    be edited in place. The program is the same."""
    from ember.export.program import Program  # no torch

    return Program.from_buffer(data).to_bytes(force_defaults=True)


class Mutator:
    """Makes mutants of one seed file; `mutant(i)` is deterministic in (seed bytes, i). Pass a
    seed made by `with_all_fields` to reach every field."""

    def __init__(self, seed: bytes, salt: int = 0) -> None:
        self.seed = seed
        self.salt = salt
        self.fields = field_map(seed)
        by_kind: dict[str, list[Field]] = {}
        for f in self.fields:
            by_kind.setdefault(f.kind, []).append(f)
        self.by_kind = by_kind
        self.meta_fields = [f for f in self.fields if ".metadata[" in f.path
                            and (f.path.endswith("MetaInt.v") or ".MetaIntList.v[" in f.path)]
        self.blobs = self._delegate_blobs()
        self.ops = [(self.scalar, 30), (self.vector_length, 10), (self.element, 16), (self.swap_tables, 10),
                    (self.union_type, 5), (self.nudge_offset, 4), (self.raw, 5)]
        if self.blobs:
            self.ops.append((self.blob_field, 12))
        if self.meta_fields:
            self.ops.append((self.metadata, 8))
        self.weights = [w for _, w in self.ops]

    def _delegate_blobs(self) -> list[tuple[int, list[erf1.Field]]]:
        from ember.export.program import Program  # no torch

        p = Program.from_buffer(self.seed)
        data_offset = struct.unpack_from("<Q", self.seed, 32)[0]
        out = []
        for m in p.root.methods or []:
            for d in m.delegates or []:
                seg = p.root.segments[d.segment]
                blob = self.seed[data_offset + seg.offset: data_offset + seg.offset + seg.size]
                fields = erf1.fields(blob)
                if fields:
                    out.append((data_offset + seg.offset, fields))
        return out

    def _value(self, rng: random.Random, fmt: str, current: int | float) -> int | float:
        if fmt == "d":
            return rng.choice([0.0, -1.0, 1e308, float("inf"), float("nan"), -0.0, current * 2])
        r = rng.random()
        if r < 0.5:
            return rng.choice(_INTERESTING)
        if r < 0.8:
            return int(current) + rng.choice([-64, -8, -4, -2, -1, 1, 2, 4, 8, 64])
        return int(current) * rng.choice([2, 4, 1024]) if r < 0.9 else rng.getrandbits(struct.calcsize(fmt) * 8)

    def _read(self, f: Field) -> int | float:
        return struct.unpack_from("<" + f.fmt, self.seed, f.pos)[0]

    # --- operators: each returns (patches, label) ---------------------------------------------
    def scalar(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        f = rng.choice(self.by_kind["scalar"])
        return [(f.pos, _pack(f.fmt, self._value(rng, f.fmt, self._read(f))))], f"scalar {f.path}"

    def vector_length(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        f = rng.choice(self.by_kind["vector_length"])
        n = rng.choice([0, 1, f.count - 1, f.count + 1, f.count * 2, 2**31 - 1, 2**32 - 1, rng.randrange(0, 4096)])
        return [(f.pos, _pack("I", max(n, 0)))], f"length {f.path} {f.count}->{n}"

    def element(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        f = rng.choice(self.by_kind["element"])
        return [(f.pos, _pack(f.fmt, self._value(rng, f.fmt, self._read(f))))], f"element {f.path}"

    def swap_tables(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        f = rng.choice(self.by_kind["table_element"])
        if f.count < 2:
            return self.scalar(rng)
        a, b = rng.sample(range(f.count), 2)
        pa, pb = f.vector + 4 * a, f.vector + 4 * b
        ta = pa + self._read(Field(pa, "I", "", ""))
        tb = pb + self._read(Field(pb, "I", "", ""))
        if rng.random() < 0.7:  # swap: reorder instructions, exchange values
            return [(pa, _pack("I", tb - pa)), (pb, _pack("I", ta - pb))], f"swap {f.path.rsplit('[', 1)[0]} {a}<->{b}"
        return [(pa, _pack("I", tb - pa))], f"duplicate {f.path.rsplit('[', 1)[0]} {b}->{a}"

    def union_type(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        f = rng.choice(self.by_kind["union_type"])
        v = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 255])
        return [(f.pos, bytes([v]))], f"union {f.path} -> {v}"

    def nudge_offset(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        f = rng.choice(self.by_kind["offset"])
        return [(f.pos, _pack("I", self._read(f) + rng.choice([-8, -4, -1, 1, 4, 8, 2**31])))], f"offset {f.path}"

    def blob_field(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        base, fields = rng.choice(self.blobs)
        f = rng.choice(fields)
        current = struct.unpack_from("<" + f.fmt, self.seed, base + f.offset)[0]
        if f.role == "kind":
            value = rng.choice([0, 1, 2, 3, 4, 2**32 - 1])
        elif f.role == "opcode":
            value = rng.choice([0, 1, 2, 3, 2**31])
        else:
            value = self._value(rng, f.fmt, current)
        return [(base + f.offset, _pack(f.fmt, value))], f"blob {f.role}@{f.offset}"

    def metadata(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        f = rng.choice(self.meta_fields)
        value = rng.choice([0, 1, -1, 2**27, 2**31, 2**40, 2**62, 2**63 - 1, -(2**63), self._read(f) + 1,
                            self._read(f) - 1, self._read(f) * 1024])
        return [(f.pos, _pack(f.fmt, value))], f"metadata {f.path} -> {value}"

    def raw(self, rng: random.Random) -> tuple[list[tuple[int, bytes]], str]:
        pos = rng.randrange(0, len(self.seed))
        return [(pos, bytes([self.seed[pos] ^ (1 << rng.randrange(8))]))], f"flip {pos}"

    # --- mutants ---------------------------------------------------------------------------------
    def mutant(self, index: int) -> Mutant:
        rng = random.Random(self.salt * 1_000_003 + index)
        m = Mutant(size=len(self.seed))
        for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
            op = rng.choices(self.ops, self.weights)[0][0]
            patches, label = op(rng)
            m.patches += patches
            m.ops.append(label)
        if rng.random() < 0.02:
            m.size = rng.randrange(0, len(self.seed))
            m.ops.append(f"truncate {m.size}")
        return m
