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
from ember.export.passes._match import Match, call, last_dim_slice, only_user, other, rewrite_chains, static_size

aten = torch.ops.aten
SWIGLU = "ember::swiglu.default"


def _match(mul: Node) -> Match | None:
    """`mul` = silu(h[..., :n]) * h[..., n:] -> (mul, (h,), chain) or None."""
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
        if last_dim_slice(gate, h, 0, n, size) and last_dim_slice(up, h, n, size, size):
            return mul, (h,), [act, gate, up]
    return None


@register_pass("fuse_swiglu")
def fuse_swiglu(g: LoweringGraph, ctx: PassContext) -> None:
    if SWIGLU not in ctx.kernel_names:
        return
    from ember.export import fused_ops  # noqa: F401  (registers ember::swiglu)

    fused = rewrite_chains(g.graph, _match, torch.ops.ember.swiglu.default)
    if fused:
        g.notes.append(f"fused {fused} SwiGLU activation(s)")
