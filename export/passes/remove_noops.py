"""Remove ops that return their input unchanged: alias, detach, clone (the graph is functional),
dtype casts to the same dtype, views/expands to the same shape and full slices."""

from __future__ import annotations

import sys

import torch
from torch.fx import Node

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass

aten = torch.ops.aten
IDENTITY_OPS = {aten.alias.default, aten.detach.default, aten.clone.default, aten.lift_fresh_copy.default}
SAME_SHAPE_OPS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.expand.default}


def _val(n: object) -> object:
    return n.meta.get("val") if isinstance(n, Node) else None


def _same_shape(a: object, b: object) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.dim() != b.dim():
        return False
    return all(x is y or (isinstance(x, int) and isinstance(y, int) and x == y) or str(x) == str(y)
               for x, y in zip(a.shape, b.shape))


def _is_noop(node: Node) -> bool:
    src = node.args[0] if node.args else None
    if not isinstance(src, Node):
        return False
    out, inp = _val(node), _val(src)
    if node.target in IDENTITY_OPS:
        return True
    if node.target in SAME_SHAPE_OPS:
        return _same_shape(out, inp)
    if node.target == aten._to_copy.default:
        return isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor) and out.dtype == inp.dtype
    if node.target == aten.slice.Tensor:
        args = list(node.args) + [None] * (5 - len(node.args))
        start, end, step = args[2], args[3], args[4]
        return (start in (None, 0)) and (step in (None, 1)) and (end is None or (isinstance(end, int) and end >= sys.maxsize // 2)) \
            and _same_shape(out, inp)
    return False


@register_pass("remove_noops")
def remove_noops(g: LoweringGraph, ctx: PassContext) -> None:
    removed = 0
    for node in list(g.graph.nodes):
        if node.op == "call_function" and _is_noop(node):
            node.replace_all_uses_with(node.args[0])
            g.graph.erase_node(node)
            removed += 1
    if removed:
        g.notes.append(f"removed {removed} no-op(s)")
