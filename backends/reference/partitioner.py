"""Partitioner and preprocess of the reference backend.

Blob layout (little-endian), read by runtime/reference_backend.cpp:
    b"ERF1", u32 num_inputs, u32 num_values, u32 num_consts, u32 num_ops, u32 num_outputs
    consts:  u32 rank, i64 sizes[rank], f32 data[numel]
    values:  u64 max_numel                              (intermediate results)
    ops:     u32 opcode, u32 num_refs, (u32 kind, u32 index) * num_refs, u32 out_value
    outputs: u32 value index                            (one per delegate output, in order)
Ref kinds: 0 delegate input, 1 value, 2 constant, 3 none. Opcodes: 0 add, 1 mul, 2 linear.
"""

from __future__ import annotations

import math
import struct
from enum import IntEnum

import torch
from torch.fx import Node

from ember.export.backend import BackendDetails, CompileSpec, Partitioner, Subgraph, register_partitioner
from ember.export.errors import ExportError

aten = torch.ops.aten


class Opcode(IntEnum):
    ADD = 0
    MUL = 1
    LINEAR = 2


class RefKind(IntEnum):
    INPUT = 0
    VALUE = 1
    CONST = 2
    NONE = 3


OPCODES = {aten.add.Tensor: Opcode.ADD, aten.mul.Tensor: Opcode.MUL, aten.linear.default: Opcode.LINEAR}


def _is_f32_tensor(x: object) -> bool:
    return isinstance(x, Node) and isinstance(x.meta.get("val"), torch.Tensor) and x.meta["val"].dtype == torch.float32


class ReferenceBackend(BackendDetails):
    id = "ember.reference"

    @classmethod
    def preprocess(cls, subgraph: Subgraph, compile_specs: list[CompileSpec]) -> bytes:
        inputs = {n: i for i, n in enumerate(subgraph.inputs)}
        consts: dict[Node, int] = {}
        const_blobs: list[bytes] = []
        values: dict[Node, int] = {}
        value_blobs: list[bytes] = []
        op_blobs: list[bytes] = []

        def ref(x: object) -> tuple[int, int]:
            if x is None:
                return RefKind.NONE, 0
            if x in inputs:
                return RefKind.INPUT, inputs[x]
            if x in values:
                return RefKind.VALUE, values[x]
            if x in subgraph.constants:
                if x not in consts:
                    t = subgraph.constants[x].detach().to(torch.float32).contiguous()
                    consts[x] = len(const_blobs)
                    const_blobs.append(struct.pack(f"<I{t.dim()}q", t.dim(), *t.shape) + t.numpy().tobytes())
                return RefKind.CONST, consts[x]
            raise ExportError(f"reference backend: operand {x} is not available inside the subgraph")

        for node in subgraph.nodes:
            code = OPCODES[node.target]
            operands = list(node.args[:3]) if code == Opcode.LINEAR else list(node.args[:2])
            if code == Opcode.LINEAR and len(operands) == 2:
                operands.append(None)
            refs = [ref(x) for x in operands]
            numel = math.prod(subgraph.max_shapes[node])
            values[node] = len(value_blobs)
            value_blobs.append(struct.pack("<Q", numel))
            flat = [v for r in refs for v in r]
            op_blobs.append(struct.pack(f"<II{len(flat)}II", code, len(refs), *flat, values[node]))
        outs = [values[n] for n in subgraph.outputs]
        header = b"ERF1" + struct.pack("<5I", len(inputs), len(value_blobs), len(const_blobs), len(op_blobs), len(outs))
        return header + b"".join(const_blobs) + b"".join(value_blobs) + b"".join(op_blobs) + struct.pack(
            f"<{len(outs)}I", *outs)


class ReferencePartitioner(Partitioner):
    """Delegates float32 add/mul (tensor operands, alpha 1) and linear with constant weights."""

    backend = ReferenceBackend

    def supports(self, node: Node, constants: dict[Node, torch.Tensor]) -> bool:
        code = OPCODES.get(node.target)
        if code is None or not isinstance(node.meta.get("val"), torch.Tensor):
            return False
        if code == Opcode.LINEAR:
            x, w = node.args[0], node.args[1]
            b = node.args[2] if len(node.args) > 2 else None
            return _is_f32_tensor(x) and w in constants and (b is None or b in constants)
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
            return False
        return all(_is_f32_tensor(a) for a in node.args)

    def ops_to_not_decompose(self) -> list[torch._ops.OpOverload]:
        return [aten.linear.default]


register_partitioner("reference", ReferencePartitioner)
