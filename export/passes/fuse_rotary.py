"""Fuse HF's rotary position embedding into `ember::rotary_embedding`:

    out = x * cos + cat(-x[..., D/2:], x[..., :D/2], -1) * sin

After decomposition that is seven kernels (two slices, neg, cat, two muls, add) per rotated
tensor (q and k of every layer); fused it is one pass over x. Matched when the chain's
intermediates have no other users, the halves are exact, and cos/sin broadcast to x's shape.
Partial rotary (Phi-3 style) matches on the rotated slice.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass
from ember.export.passes._match import (Match, call, last_dim, last_dim_slice, only_user, other, rewrite_chains,
                                        static_size, val)

aten = torch.ops.aten
ROTARY = "ember::rotary_embedding.default"


def _rotate_half_of(cat: Node) -> Node | None:
    """x when `cat` = cat([-x[..., D/2:], x[..., :D/2]], -1) with single-use pieces, else None."""
    if not call(cat, aten.cat.default) or len(cat.args) != 2 or not last_dim(cat, cat.args[1]):
        return None
    pieces = cat.args[0]
    if not isinstance(pieces, (list, tuple)) or len(pieces) != 2:
        return None
    neg, lo = pieces
    if not (call(neg, aten.neg.default) and only_user(neg, cat) and isinstance(lo, Node) and only_user(lo, cat)):
        return None
    hi = neg.args[0]
    if not (isinstance(hi, Node) and only_user(hi, neg) and isinstance(lo.args[0], Node)):
        return None
    x = lo.args[0]
    size = static_size(x, -1)
    if size is None or size % 2:
        return None
    half = size // 2
    if not (last_dim_slice(lo, x, 0, half, size) and last_dim_slice(hi, x, half, size, size)):
        return None
    return x


def _broadcasts_to(t: object, x: Node) -> bool:
    tv, xv = val(t), val(x)
    if not isinstance(tv, torch.Tensor) or tv.dim() > xv.dim() or tv.dim() < 1:
        return False
    for a, b in zip(reversed(tv.shape), reversed(xv.shape)):
        if not (a == 1 or a is b or (isinstance(a, int) and isinstance(b, int) and a == b) or str(a) == str(b)):
            return False
    return isinstance(tv.shape[-1], int) and tv.shape[-1] == xv.shape[-1]


def _match(add: Node) -> Match | None:
    """`add` = x * cos + rotate_half(x) * sin -> (add, (x, cos, sin), chain) or None."""
    if not call(add, aten.add.Tensor) or len(add.args) != 2 or add.kwargs:
        return None
    for m_rot in add.args:
        m_x = other(add, m_rot)
        if not (call(m_rot, aten.mul.Tensor) and call(m_x, aten.mul.Tensor) and m_rot is not m_x):
            continue
        if not (only_user(m_rot, add) and only_user(m_x, add)):
            continue
        for cat in m_rot.args:
            if not call(cat, aten.cat.default) or not only_user(cat, m_rot):
                continue
            x = _rotate_half_of(cat)
            if x is None or x not in m_x.args:
                continue
            sin, cos = other(m_rot, cat), other(m_x, x)
            if not (_broadcasts_to(sin, x) and _broadcasts_to(cos, x)):
                continue
            if tuple(val(add).shape) != tuple(val(x).shape) or val(add).dtype != val(x).dtype:
                continue
            neg = cat.args[0][0]
            return add, (x, cos, sin), [m_x, m_rot, cat, neg, neg.args[0], cat.args[0][1]]
    return None


@register_pass("fuse_rotary")
def fuse_rotary(g: LoweringGraph, ctx: PassContext) -> None:
    if ROTARY not in ctx.kernel_names:
        return
    from ember.export import fused_ops  # noqa: F401  (registers ember::rotary_embedding)

    fused = rewrite_chains(g.graph, _match, torch.ops.ember.rotary_embedding.default)
    if fused:
        g.notes.append(f"fused {fused} rotary embedding(s)")

