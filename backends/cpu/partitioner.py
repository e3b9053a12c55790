"""Partitioner and preprocess of the CPU delegate (`ember.cpu`).

One delegate call per quantized op: the blob is the packed weight alone (backends/cpu/packing.py)
and what the call does with it travels in its compile specs (`op`: linear or embedding;
`act_quant`: the linear's ActQuant), so calls that read the same weight share one blob.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from ember.backends.cpu import packing
from ember.export.backend import BackendDetails, CompileSpec, Partitioner, Subgraph, register_partitioner
from ember.export.errors import ExportError

BACKEND_ID = "ember.cpu"
OP_LINEAR = b"linear"
OP_EMBEDDING = b"embedding"


def _linear():
    return torch.ops.ember.quantized_linear.default


def _embedding():
    return torch.ops.ember.quantized_embedding.default


def _is_f32(x: object) -> bool:
    return isinstance(x, Node) and isinstance(x.meta.get("val"), torch.Tensor) and x.meta["val"].dtype == torch.float32


def _weight_args(node: Node) -> tuple[list[object], int, int]:
    """(qdata, scale, zero_point, offset[, bias]) nodes, bits and group size of a quantized op."""
    if node.target is _linear():
        x, qdata, scale, zp, offset, bias, bits, gs, _ = node.args
        return [qdata, scale, zp, offset, bias], bits, gs
    qdata, scale, zp, offset, _, bits, gs, _ = node.args
    return [qdata, scale, zp, offset], bits, gs


def _int8_linear_reads(qdata: Node) -> bool:
    """Whether an int8-activation linear reads this weight (it needs the packed row sums). Asked of
    the weight's users in the graph, so a tied table's two calls pack the same bytes."""
    return any(u.target is _linear() and u.args[1] is qdata and int(u.args[8]) == 1 for u in qdata.users)


class CpuBackend(BackendDetails):
    id = BACKEND_ID

    @classmethod
    def _node(cls, subgraph: Subgraph) -> Node:
        ops = [n for n in subgraph.nodes if n.target in (_linear(), _embedding())]
        if len(ops) != 1 or len(subgraph.nodes) != 1:
            raise ExportError(f"{BACKEND_ID}: a subgraph must be one quantized op, got {[n.name for n in subgraph.nodes]}")
        return ops[0]

    @classmethod
    def preprocess(cls, subgraph: Subgraph, compile_specs: list[CompileSpec]) -> bytes:
        node = cls._node(subgraph)
        args, bits, gs = _weight_args(node)
        t = [None if a is None else subgraph.constants[a] for a in args]
        bias = t[4] if len(t) > 4 else None
        return packing.pack(t[0], t[1], t[2], t[3], bias, bits, gs, rowsum=_int8_linear_reads(args[0]))

    @classmethod
    def subgraph_compile_specs(cls, subgraph: Subgraph) -> list[CompileSpec]:
        node = cls._node(subgraph)
        args, _, _ = _weight_args(node)
        name = subgraph.constant_names.get(args[0], "")
        name = name.removesuffix(".qdata").removesuffix(".parametrizations.weight.original0")
        weight = [CompileSpec("weight", name.encode())] if name else []  # for ember inspect
        if node.target is _linear():
            return [CompileSpec("op", OP_LINEAR), CompileSpec("act_quant", bytes([int(node.args[8])]))] + weight
        return [CompileSpec("op", OP_EMBEDDING)] + weight


class CpuPartitioner(Partitioner):
    """Takes fp32 quantized linears and embeddings whose weights are constants it can pack."""

    backend = CpuBackend
    max_subgraph_nodes = 1

    def supports(self, node: Node, constants: dict[Node, torch.Tensor]) -> bool:
        if node.target is _linear():
            if not (_is_f32(node.args[0]) and _is_f32(node)) or int(node.args[8]) not in (0, 1, 2):
                return False
        elif node.target is _embedding():
            if node.args[7] != torch.float32:
                return False
        else:
            return False
        args, bits, gs = _weight_args(node)
        if any(a is not None and a not in constants for a in args):
            return False
        qdata, scale, zp, offset = (None if a is None else constants[a] for a in args[:4])
        bias = constants[args[4]] if len(args) > 4 and args[4] is not None else None
        if bias is not None and bias.dtype != torch.float32:
            return False
        n, k = qdata.shape[0], qdata.shape[1] * (2 if bits == 4 else 1)
        return packing.unsupported_reason(n, k, gs, bits, {"scale": scale, "zero_point": zp, "offset": offset}) is None


register_partitioner("cpu", CpuPartitioner)
