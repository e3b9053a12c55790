"""Fuse the decomposed RMSNorm that HF models write by hand into one `aten::rms_norm`:

    y = x * rsqrt(mean(x ** 2, -1, keepdim=True) + eps)      [ * weight ]

The chain (pow, mean, add, rsqrt, mul and the weight's mul) runs as six small kernels per norm
in decode; fused it is one pass over the row. Matched only on fp32 values (HF upcasts before
normalizing, so half-precision models match on the upcast value) and only when the intermediate
results have no other users. The weight is folded in when it is a constant of the row's size
applied right after (`weight * y` or `y * weight`, e.g. Gemma's folded `1 + weight`).
"""

from __future__ import annotations

import torch
from torch.fx import Node

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass
from ember.export.passes._match import (Match, call, dtype, last_dim, only_user, other, rewrite_chains, static_size,
                                        val)

aten = torch.ops.aten
RMS_NORM = "aten::rms_norm.default"


def _match_norm(mul: Node) -> tuple[Node, float, list[Node]] | None:
    """`mul` = x * rsqrt(mean(pow(x, 2), [-1], True) + eps) -> (x, eps, chain nodes) or None."""
    if not call(mul, aten.mul.Tensor) or len(mul.args) != 2:
        return None
    for r in mul.args:
        x = other(mul, r)
        if not (call(r, aten.rsqrt.default) and only_user(r, mul)):
            continue
        add = r.args[0]
        if not (call(add, aten.add.Tensor) and only_user(add, r) and len(add.args) == 2 and not add.kwargs):
            continue
        mean, eps = add.args
        if not (call(mean, aten.mean.dim) and isinstance(eps, (int, float)) and only_user(mean, add)):
            continue
        margs = list(mean.args) + [None] * (3 - len(mean.args))
        dims, keepdim = margs[1], mean.kwargs.get("keepdim", margs[2])
        if mean.kwargs.get("dtype") is not None or keepdim is not True or not isinstance(dims, (list, tuple)) \
                or len(dims) != 1 or not last_dim(x, dims[0]):
            continue
        pw = mean.args[0]
        if not (call(pw, aten.pow.Tensor_Scalar) and pw.args[0] is x and pw.args[1] == 2 and only_user(pw, mean)):
            continue
        if dtype(x) != torch.float32 or dtype(mul) != torch.float32 or static_size(x, -1) is None:
            continue
        return x, float(eps), [mul, r, add, mean, pw]
    return None


def _weight(y: Node, g: LoweringGraph, size: int) -> tuple[Node, Node] | None:
    """The constant fp32 [size] weight multiplied into `y` right after, with that mul."""
    if len(y.users) != 1:
        return None
    (mul,) = y.users
    if not call(mul, aten.mul.Tensor) or len(mul.args) != 2 or mul.kwargs:
        return None
    w = other(mul, y)
    if not isinstance(w, Node) or w not in g.constants:
        return None
    t = g.constants[w]
    if t.dtype != torch.float32 or tuple(t.shape) != (size,) or dtype(mul) != torch.float32:
        return None
    if tuple(val(mul).shape) != tuple(val(y).shape):
        return None
    return w, mul


@register_pass("fuse_rms_norm")
def fuse_rms_norm(g: LoweringGraph, ctx: PassContext) -> None:
    if RMS_NORM not in ctx.kernel_names:
        return

    def match(node: Node) -> Match | None:
        m = _match_norm(node)
        if m is None:
            return None
        x, eps, chain = m
        size = static_size(x, -1)
        weighted = _weight(node, g, size)
        if weighted is None:
            return node, (x, [size], None, eps), chain
        weight, mul = weighted
        return mul, (x, [size], weight, eps), chain

    fused = rewrite_chains(g.graph, match, aten.rms_norm.default)
    if fused:
        g.notes.append(f"fused {fused} RMSNorm(s)")
