"""Crafted hostile .ember files, each made through ember.export.Program from a valid lowering.

Every builder takes the bytes of a valid program and returns a variant that once crashed or
exhausted the runtime (issue 12): the loader must now refuse it with a clean error.
"""

from __future__ import annotations

import copy
import struct

from ember.export.program import Program
from ember.fb.InstructionKind import InstructionKind
from ember.fb.Storage import Storage
from ember.fb.ValueKind import ValueKind
from tests.runtime.fuzz import erf1


def _method(p: Program):  # noqa: ANN202 - the flatbuffer object type
    return p.root.methods[0]


def _tensor(p: Program, index: int):  # noqa: ANN202
    v = _method(p).values[index]
    assert v.vType == ValueKind.Tensor
    return v.v


def _kernel_calls(p: Program) -> list[tuple[int, str, list[int], list[int]]]:
    m = _method(p)
    out = []
    for k, ins in enumerate(m.instructions):
        if ins.iType == InstructionKind.KernelCall:
            name = m.operators[ins.i.op].name
            out.append((k, name.decode() if isinstance(name, bytes) else name, list(ins.i.args), list(ins.i.outputs)))
    return out


def consumer_before_view(data: bytes) -> bytes:
    """Swaps a view with the instruction that reads it: the reader ran on the alias left over
    from the previous call (a freed input)."""
    p = Program.from_buffer(data)
    m = _method(p)
    calls = _kernel_calls(p)
    view = next(c for c in calls if c[1].startswith("aten::view"))
    reader = next(c for c in calls if c[0] > view[0] and view[3][0] in c[2])
    m.instructions[view[0]], m.instructions[reader[0]] = m.instructions[reader[0]], m.instructions[view[0]]
    return p.to_bytes()


def unlisted_input(data: bytes) -> bytes:
    """Drops the method's inputs: the Input tensor is never bound (its data is null)."""
    p = Program.from_buffer(data)
    _method(p).inputs = []
    return p.to_bytes()


def unbound_alias(data: bytes) -> bytes:
    """Points the first kernel's tensor argument at a new rank-0 Alias tensor nothing binds."""
    p = Program.from_buffer(data)
    m = _method(p)
    k, _, args, _ = _kernel_calls(p)[0]
    first = next(a for a in args if m.values[a].vType == ValueKind.Tensor)
    alias = copy.deepcopy(m.values[first])
    alias.v.storage = Storage.Alias
    alias.v.sizes = []
    alias.v.dynamic = []
    m.values.append(alias)
    m.instructions[k].i.args = [len(m.values) - 1 if a == first else a for a in args]
    return p.to_bytes()


def misaligned_arena(data: bytes) -> bytes:
    """Moves an arena float tensor to an odd offset (still inside the arena)."""
    p = Program.from_buffer(data)
    m = _method(p)
    t = next(v.v for v in m.values if v.vType == ValueKind.Tensor and v.v.storage == Storage.Arena)
    t.offset += 2
    return p.to_bytes()


def misaligned_constant(data: bytes) -> bytes:
    """Moves a constant float tensor 2 bytes into a segment padded to keep it in bounds."""
    p = Program.from_buffer(data)
    m = _method(p)
    t = next(v.v for v in m.values if v.vType == ValueKind.Tensor and v.v.storage == Storage.Constant)
    p.segments[t.segment] = bytes(p.segments[t.segment]) + b"\0" * 8
    t.offset += 2
    return p.to_bytes()


def overlapping_copy(data: bytes) -> bytes:
    """Places a copying kernel's output 4 bytes into the arena slice it reads."""
    p = Program.from_buffer(data)
    m = _method(p)
    for _, _, args, outs in _kernel_calls(p):
        src = next((a for a in args if m.values[a].vType == ValueKind.Tensor
                    and m.values[a].v.storage == Storage.Arena), None)
        dst = m.values[outs[0]].v if m.values[outs[0]].vType == ValueKind.Tensor else None
        if src is not None and dst is not None and dst.storage == Storage.Arena:
            dst.offset = m.values[src].v.offset + 4
            end = max(v.v.offset + v.v.nbytes for v in m.values
                      if v.vType == ValueKind.Tensor and v.v.storage == Storage.Arena)
            m.arenaSize = (end + 63) // 64 * 64  # the arena its values use, as the planner sizes it
            return p.to_bytes()
    raise AssertionError("no kernel reads and writes arena tensors in this program")


def oversized_arena(data: bytes) -> bytes:
    """Declares an arena of 2^40 bytes that no value uses."""
    p = Program.from_buffer(data)
    _method(p).arenaSize = 1 << 40
    return p.to_bytes()


def huge_state(data: bytes, numel: int = 1 << 29) -> bytes:
    """Declares `numel` float32s of program state (2 GiB by default) in a file of a few KB."""
    p = Program.from_buffer(data)
    p.root.state[0].sizes = [numel]
    return p.to_bytes()


def _reference_blob(p: Program) -> tuple[int, bytes]:
    d = _method(p).delegates[0]
    return d.segment, bytes(p.segments[d.segment])


def delegate_operand_none(data: bytes) -> bytes:
    """Sets the first operand of the reference delegate's first op to kind 3 ("none")."""
    p = Program.from_buffer(data)
    seg, blob = _reference_blob(p)
    kind = next(f for f in erf1.fields(blob) if f.role == "kind")
    p.segments[seg] = erf1.with_field(blob, kind, 3)
    return p.to_bytes()


def delegate_huge_value(data: bytes, numel: int = 1 << 32) -> bytes:
    """Declares a reference-delegate intermediate value of `numel` floats (16 GiB by default)."""
    p = Program.from_buffer(data)
    seg, blob = _reference_blob(p)
    field = next(f for f in erf1.fields(blob) if f.role == "numel")
    p.segments[seg] = erf1.with_field(blob, field, numel)
    return p.to_bytes()


def with_metadata(data: bytes, key: str, value: int) -> bytes:
    """`data` with integer metadata `key` set to `value` (an LLM's llm.vocab_size, say)."""
    p = Program.from_buffer(data)
    entry = next(e for e in p.root.metadata if (e.key.decode() if isinstance(e.key, bytes) else e.key) == key)
    entry.value.v = value
    return p.to_bytes()


def header_fields(data: bytes) -> dict[str, int]:
    fb_offset, fb_size, data_offset, data_size = struct.unpack_from("<QQQQ", data, 16)
    return {"fb_offset": fb_offset, "fb_size": fb_size, "data_offset": data_offset, "data_size": data_size}
