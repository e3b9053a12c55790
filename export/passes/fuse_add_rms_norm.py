"""Fuse a residual add and the RMSNorm that reads it into one `ember::add_rms_norm`:

    h = x + residual;  y = rms_norm(h, [D], weight, eps)      (h also read later: the residual stream)

A pre-norm decoder layer does this twice (before its MLP and before the next layer's attention, or
the final norm): fused, one kernel reads x and residual once and writes h and y, instead of two
kernels over the row. Decode runs each such pair per session between the batched linears, on one
thread: the fewer small instructions there, the shorter a batched step. Matched on fp32 operands of
one shape (no broadcasting), an add without alpha, and a norm over the last dim.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Node

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass
from ember.export.passes._match import call, dtype, erased, static_size, val

aten = torch.ops.aten
ADD_RMS_NORM = "ember::add_rms_norm.default"


def _match(norm: Node) -> tuple[Node, Node, Node] | None:
    """`norm` = rms_norm(x + residual, [D], weight, eps) -> (the add, x, residual) or None."""
    if not call(norm, aten.rms_norm.default) or norm.kwargs or len(norm.args) < 2:
        return None
    h, shape = norm.args[0], norm.args[1]
    if not (call(h, aten.add.Tensor) and len(h.args) == 2 and not h.kwargs):
        return None
    x, residual = h.args
    if not (isinstance(x, Node) and isinstance(residual, Node)):
        return None
    if any(dtype(n) != torch.float32 for n in (x, residual, h, norm)):
        return None
    vx, vr = val(x), val(residual)
    if tuple(vx.shape) != tuple(vr.shape) or tuple(val(h).shape) != tuple(vx.shape):
        return None
    size = static_size(x, -1)
    if size is None or not isinstance(shape, (list, tuple)) or list(shape) != [size]:
        return None
    return h, x, residual


@register_pass("fuse_add_rms_norm")
def fuse_add_rms_norm(g: LoweringGraph, ctx: PassContext) -> None:
    if ADD_RMS_NORM not in ctx.kernel_names:
        return
    from ember.export import fused_ops  # noqa: F401  (registers ember::add_rms_norm)

    fused = 0
    order = {n: i for i, n in enumerate(g.graph.nodes)}
    for norm in list(g.graph.nodes):
        if erased(norm):
            continue
        m = _match(norm)
        if m is None:
            continue
        h, x, residual = m
        # The fused op takes the norm's place (its weight may be a constant defined just before it):
        # every other reader of the sum must come after it.
        if any(order.get(u, -1) < order[norm] for u in h.users if u is not norm):  # -1: a node made here
            continue
        args = list(norm.args) + [None] * (4 - len(norm.args))
        weight, eps = args[2], args[3]
        if not (weight is None or (isinstance(weight, Node) and weight in g.constants)) or \
                not (eps is None or isinstance(eps, (int, float))):
            continue
        with g.graph.inserting_before(norm):
            op = g.graph.call_function(torch.ops.ember.add_rms_norm.default, (x, residual, weight, eps))
        op.meta["val"] = (val(h), val(norm))
        with g.graph.inserting_after(op):
            s = g.graph.call_function(operator.getitem, (op, 0))
        s.meta["val"] = val(h)
        with g.graph.inserting_after(s):
            y = g.graph.call_function(operator.getitem, (op, 1))
        y.meta["val"] = val(norm)
        norm.replace_all_uses_with(y)
        g.graph.erase_node(norm)
        h.replace_all_uses_with(s)
        g.graph.erase_node(h)
        fused += 1
    if fused:
        g.notes.append(f"fused {fused} residual add(s) into the RMSNorm that follows")
