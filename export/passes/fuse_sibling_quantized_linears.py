"""Fuse ``ember::quantized_linear`` calls that read the same input with the same scheme (q/k/v,
gate/up) into one call over the weights stacked along N, followed by slices of its output.

The quantized counterpart of ``fuse_sibling_linears``: one longer weight stream and one thread-pool
round trip instead of three (or two) per decoder layer in decode. Exact: rows of a quantized weight
are independent (groups run along a row), and the siblings share their input, so the dynamic int8
activation quantization (per token of the input) is the same for all of them. Siblings fuse only
when bits, group size, activation quantization, the dtypes of every per-group parameter and the
presence of zero point, offset and bias agree; the stacked tensors replace the originals in the file.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Node

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass
from ember.export.passes._match import call
from ember.export.passes._quant_match import add_constant

aten = torch.ops.aten
_QLINEAR = torch.ops.ember.quantized_linear.default


@dataclass(frozen=True)
class _Sibling:
    node: Node
    tensors: tuple[torch.Tensor | None, ...]  # qdata, scale, zero_point, offset, bias (constants)
    names: tuple[str | None, ...]  # their state-dict names, for the file's weight table
    key: tuple[Any, ...]  # what must agree for two siblings to share one call


def _dtype(t: torch.Tensor | None) -> torch.dtype | None:
    return None if t is None else t.dtype


def _sibling(g: LoweringGraph, node: Node) -> _Sibling | None:
    if not call(node, _QLINEAR) or node.kwargs or len(node.args) != 9:
        return None
    operands = node.args[1:6]  # qdata, scale, zero_point, offset, bias
    if any(a is not None and a not in g.constants for a in operands):
        return None
    tensors = tuple(None if a is None else g.constants[a] for a in operands)
    qdata = tensors[0]
    bits, group_size, act_quant = node.args[6:9]
    key = (bits, group_size, act_quant, qdata.dtype, qdata.shape[1], *(_dtype(t) for t in tensors[1:]))
    names = tuple(None if a is None else g.constant_names.get(a) for a in operands)
    return _Sibling(node, tensors, names, key)


def _stack(parts: list[torch.Tensor], rows: list[int], groups: int) -> torch.Tensor:
    """Per-sibling [N_i, G] (or [1, 1], one value for every group) -> [sum N_i, G]; [1, 1] stays
    [1, 1] when every sibling holds the same single value."""
    if all(tuple(p.shape) == (1, 1) for p in parts) and all(torch.equal(p, parts[0]) for p in parts):
        return parts[0]
    return torch.cat([p.expand(n, groups) for p, n in zip(parts, rows)], dim=0).contiguous()


def _fused_name(names: list[str | None], field: str) -> str:
    """'a.q_proj.qdata', 'a.k_proj.qdata' -> 'a.q_proj+k_proj.qdata' (the modules a fused tensor stacks)."""
    modules = [n.rsplit(".", 1)[0] if n else "?" for n in names]
    prefix = modules[0].rsplit(".", 1)[0] + "." if "." in modules[0] else ""
    if all(m.startswith(prefix) for m in modules):
        modules = [modules[0]] + [m[len(prefix):] for m in modules[1:]]
    return "+".join(modules) + f".{field}"


_FIELDS = ("qdata", "scale", "zero_point", "offset", "bias")


def _fuse(g: LoweringGraph, x: Node, siblings: list[_Sibling], order: dict[Node, int]) -> None:
    first = min((s.node for s in siblings), key=order.__getitem__)
    bits, group_size, act_quant = first.args[6:9]
    rows = [s.tensors[0].shape[0] for s in siblings]
    groups = siblings[0].tensors[1].shape[1]
    args: list[Any] = [x]
    for i, field in enumerate(_FIELDS):
        parts = [s.tensors[i] for s in siblings]
        if parts[0] is None:
            args.append(None)
            continue
        if field in ("qdata", "bias"):  # [N_i, ...] rows
            value = torch.cat(parts, dim=0).contiguous()
        else:
            value = _stack(parts, rows, groups)
        args.append(add_constant(g, first, _fused_name([s.names[i] for s in siblings], field), value))
    with g.graph.inserting_before(first):
        out = g.graph.call_function(_QLINEAR, (*args, bits, group_size, act_quant))
        vals = [s.node.meta["val"] for s in siblings]
        with vals[0].fake_mode:  # shapes may be symbolic: compute the result's meta in fake mode
            out.meta["val"] = torch.cat(vals, dim=-1)
        pieces, start = [], 0
        for s, n in zip(siblings, rows):
            piece = g.graph.call_function(aten.slice.Tensor, (out, -1, start, start + n))
            piece.meta["val"] = s.node.meta["val"]
            pieces.append(piece)
            start += n
    # Erase only after inserting: `first` is the insertion point above.
    for s, piece in zip(siblings, pieces):
        s.node.replace_all_uses_with(piece)
        g.graph.erase_node(s.node)


@register_pass("fuse_sibling_quantized_linears")
def fuse_sibling_quantized_linears(g: LoweringGraph, ctx: PassContext) -> None:
    fused = 0
    order = {n: i for i, n in enumerate(g.graph.nodes)}  # new nodes are never candidates
    for node in list(g.graph.nodes):
        by_key: dict[tuple[Any, ...], list[_Sibling]] = defaultdict(list)
        for user in node.users:
            s = _sibling(g, user) if user.args and user.args[0] is node else None
            if s is not None:
                by_key[s.key].append(s)
        for siblings in by_key.values():
            if len(siblings) >= 2:
                _fuse(g, node, sorted(siblings, key=lambda s: order[s.node]), order)
                fused += 1
    if fused:
        g.remove_dead_nodes()
        g.notes.append(f"fused {fused} group(s) of sibling quantized linears")
