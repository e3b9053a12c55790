"""Fuse the SwiGLU activation of a fused gate/up projection into `ember::swiglu`:

    silu(h[..., :n]) * h[..., n:]      with h [..., 2n] (e.g. the output of the linear that
                                       fuse_sibling_linears made from gate_proj and up_proj)

Saves two slice copies, the silu and the mul kernels per MLP. Matched when both halves are
exact, single-use slices of the same tensor.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass
from ember.export.passes._match import call, erase_dead, only_user, other, replace, static_size
from ember.export.passes.fuse_rotary import _slice

aten = torch.ops.aten
SWIGLU = "ember::swiglu.default"


def _match(mul: Node) -> tuple[Node, list[Node]] | None:
    """`mul` = silu(h[..., :n]) * h[..., n:] -> (h, chain) or None."""
    if not call(mul, aten.mul.Tensor) or len(mul.args) != 2 or mul.kwargs:
        return None
    for act in mul.args:
        up = other(mul, act)
        if not (call(act, aten.silu.default) and only_user(act, mul) and call(up, aten.slice.Tensor)
                and only_user(up, mul) and up is not act):
            continue
        gate = act.args[0]
        if not (call(gate, aten.slice.Tensor) and only_user(gate, act)):
            continue
        h = gate.args[0]
        size = static_size(h, -1)
        if not isinstance(h, Node) or size is None or size % 2:
            continue
        n = size // 2
        if _slice(gate, h, 0, n, size) and _slice(up, h, n, size, size):
            return h, [act, gate, up]
    return None


@register_pass("fuse_swiglu")
def fuse_swiglu(g: LoweringGraph, ctx: PassContext) -> None:
    if SWIGLU not in ctx.kernel_names:
        return
    from ember.export import fused_ops  # noqa: F401  (registers ember::swiglu)

    fused = 0
    for node in list(g.graph.nodes):
        m = _match(node)
        if m is None:
            continue
        h, chain = m
        replace(g.graph, node, torch.ops.ember.swiglu.default, (h,))
        erase_dead(g.graph, chain)
        fused += 1
    if fused:
        g.notes.append(f"fused {fused} SwiGLU activation(s)")
