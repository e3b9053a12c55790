"""Matchers for torchao's exported quantization patterns, shared by the fuse_quantized_* passes.

torchao's ``IntxUnpackedToInt8Tensor`` weights export (after decomposition) as

    w = torchao.dequantize_affine(qdata int8 [N, K], [1, gs], scale [N, K/gs], zero_point, int8, qmin, qmax)

and its dynamic int8 per-token activations as

    s, z = torchao.choose_qparams_affine(x, "ASYMMETRIC", [1, .., 1, K], int8, -128, 127, None, None, int8)
    x'   = torchao.dequantize_affine(torchao.quantize_affine(x, block, s, z, int8, -128, 127), block, s, z, ...)
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Node

from ember.export.graph import LoweringGraph
from ember.export.passes._match import call
from ember.export.quant_ops import bits_of_range, canonical_from_codes


def _torchao_op(name: str) -> Any:
    ns = getattr(torch.ops, "torchao", None)
    packet = getattr(ns, name, None) if ns is not None else None
    return getattr(packet, "default", None) if packet is not None else None


def torchao_quant_ops() -> set[Any]:
    """torchao's quantization primitives that the fuse_quantized_* passes match (when torchao is loaded)."""
    ops = (_torchao_op(n) for n in ("dequantize_affine", "quantize_affine", "choose_qparams_affine"))
    return {op for op in ops if op is not None}


def _args(node: Node) -> dict[str, Any]:
    """The call's arguments by schema name, defaults filled in."""
    out = {}
    for i, a in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


@dataclass
class CanonicalWeight:
    """A weight in ember's canonical format (export/quant_ops.py), ready to become constants."""

    qdata: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor | None
    bits: int
    group_size: int
    dtype: torch.dtype  # the float dtype torchao dequantizes to
    name: str  # the module the weight belongs to, for summaries


def _scalar_type(v: Any) -> torch.dtype:
    """A ScalarType argument: a torch.dtype, or the schema default's integer code."""
    if isinstance(v, torch.dtype):
        return v
    return {5: torch.float16, 6: torch.float32, 15: torch.bfloat16}.get(v, torch.float32)


def _module_name(g: LoweringGraph, node: Node) -> str:
    target = g.constant_names.get(node, node.name)
    return target.split(".parametrizations.")[0]


def canonical_weight(g: LoweringGraph, node: Any) -> CanonicalWeight | None:
    """``node`` is torchao's dequantize_affine of constant [N, K] int8 codes -> the canonical weight."""
    op = _torchao_op("dequantize_affine")
    if op is None or not call(node, op):
        return None
    a = _args(node)
    qdata, scale, zp = a.get("input"), a.get("scale"), a.get("zero_point")
    if qdata not in g.constants or scale not in g.constants or (zp is not None and zp not in g.constants):
        return None
    q = g.constants[qdata]
    block = list(a.get("block_size") or [])
    qmin, qmax = a.get("quant_min"), a.get("quant_max")
    if q.dtype != torch.int8 or q.dim() != 2 or len(block) != 2 or block[0] != 1 or a.get("input_dtype") != torch.int8:
        return None
    n, k = q.shape
    gs = int(block[1])
    if gs <= 0 or k % gs or not isinstance(qmin, int) or not isinstance(qmax, int):
        return None
    bits = bits_of_range(qmin, qmax)
    if bits is None or (bits == 4 and (k % 2 or gs % 2)):
        return None
    s = g.constants[scale]
    if s.numel() != n * (k // gs) or not s.dtype.is_floating_point:
        return None
    z = g.constants[zp] if zp is not None else None
    if z is not None and z.numel() != s.numel():
        return None
    qd, s, z = canonical_from_codes(q, s, z, bits, gs)
    out_dtype = _scalar_type(a.get("output_dtype"))
    return CanonicalWeight(qd, s, z, bits, gs, out_dtype, _module_name(g, qdata))


def dynamic_int8_source(x: Any) -> Node | None:
    """``x`` is torchao's int8 per-token asymmetric quant-dequant of some node -> that node."""
    deq, quant, choose = (_torchao_op(n) for n in ("dequantize_affine", "quantize_affine", "choose_qparams_affine"))
    if choose is None or not call(x, deq):
        return None
    d = _args(x)
    q = d.get("input")
    if not call(q, quant):
        return None
    qa = _args(q)
    src = qa.get("input")
    s, z = qa.get("scale"), qa.get("zero_point")
    if not (call(s, operator.getitem) and call(z, operator.getitem)) or s.args[0] is not z.args[0]:
        return None
    if (s.args[1], z.args[1]) != (0, 1) or d.get("scale") is not s or d.get("zero_point") is not z:
        return None
    c = s.args[0]
    if not call(c, choose):
        return None
    ca = _args(c)
    val = src.meta.get("val") if isinstance(src, Node) else None
    if ca.get("input") is not src or not isinstance(val, torch.Tensor):
        return None
    per_token = [1] * (val.dim() - 1) + [val.shape[-1]]
    eps = ca.get("eps")
    ok = (ca.get("mapping_type") == "ASYMMETRIC" and ca.get("target_dtype") == torch.int8
          and (ca.get("quant_min"), ca.get("quant_max")) == (-128, 127)
          and (qa.get("quant_min"), qa.get("quant_max")) == (-128, 127)
          and (d.get("quant_min"), d.get("quant_max")) == (-128, 127)
          and list(ca.get("block_size")) == per_token == list(qa.get("block_size")) == list(d.get("block_size"))
          and ca.get("scale_dtype") in (None, val.dtype)
          and (eps is None or math.isclose(eps, torch.finfo(val.dtype).smallest_normal)))
    return src if ok else None


def add_constant(g: LoweringGraph, before: Node, name: str, value: torch.Tensor) -> Node:
    """A new constant node (registered on the graph module) inserted before ``before``."""
    attr = "_ember_q_" + "".join(c if c.isalnum() else "_" for c in name)
    while hasattr(g.gm, attr):
        attr += "_"
    g.gm.register_buffer(attr, value)
    with g.graph.inserting_before(before):
        node = g.graph.get_attr(attr)
    node.meta["val"] = value
    g.constants[node] = value
    g.constant_names[node] = name
    return node


def weight_nodes(g: LoweringGraph, before: Node, w: CanonicalWeight) -> tuple[Node, Node, Node | None]:
    """Constant nodes for a canonical weight's codes, scales and zero points."""
    qdata = add_constant(g, before, f"{w.name}.qdata", w.qdata)
    scale = add_constant(g, before, f"{w.name}.scale", w.scale)
    zp = add_constant(g, before, f"{w.name}.zero_point", w.zero_point) if w.zero_point is not None else None
    return qdata, scale, zp


def replace_with_call(g: LoweringGraph, node: Node, target: Any, args: tuple[Any, ...]) -> None:
    """Replaces ``node`` by a call of ``target`` on ``args`` (same meta, same users)."""
    with g.graph.inserting_before(node):
        new = g.graph.call_function(target, args)
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    g.graph.erase_node(node)
