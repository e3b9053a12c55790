"""Fuse linears that read the same input (q/k/v projections, gate/up) into one linear over the
concatenated weights, followed by slices of its output.

Decode is memory-bound: one longer weight stream per input runs closer to the memory bandwidth
than several short ones, and saves a thread-pool round trip per fused linear. The concatenated
weight replaces the originals in the file (they are no longer read), so the file does not grow.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass

aten = torch.ops.aten


def _weight_and_bias(node: Node, g: LoweringGraph) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    if node.op != "call_function" or node.target != aten.linear.default or node.kwargs:
        return None
    weight = node.args[1]
    bias = node.args[2] if len(node.args) > 2 else None
    if weight not in g.constants or (bias is not None and bias not in g.constants):
        return None
    w = g.constants[weight]
    return w, (g.constants[bias] if bias is not None else None)


@register_pass("fuse_sibling_linears")
def fuse_sibling_linears(g: LoweringGraph, ctx: PassContext) -> None:
    fused = 0
    order = {n: i for i, n in enumerate(g.graph.nodes)}  # new nodes are never candidates
    for node in list(g.graph.nodes):
        users = [u for u in node.users if u.args and u.args[0] is node and _weight_and_bias(u, g) is not None]
        if len(users) < 2:
            continue
        parts = [_weight_and_bias(u, g) for u in users]
        dtypes = {w.dtype for w, _ in parts}
        has_bias = {b is not None for _, b in parts}
        if len(dtypes) != 1 or len(has_bias) != 1 or len({w.shape[1] for w, _ in parts}) != 1:
            continue
        weight = torch.cat([w for w, _ in parts], dim=0).contiguous()
        bias = torch.cat([b for _, b in parts], dim=0).contiguous() if has_bias == {True} else None
        first = min(users, key=order.__getitem__)
        with g.graph.inserting_before(first):
            w_node = g.graph.get_attr(_register(g, f"_ember_fused_w_{first.name}", weight))
            w_node.meta["val"] = weight
            g.constants[w_node] = weight
            args = [node, w_node]
            if bias is not None:
                b_node = g.graph.get_attr(_register(g, f"_ember_fused_b_{first.name}", bias))
                b_node.meta["val"] = bias
                g.constants[b_node] = bias
                args.append(b_node)
            out = g.graph.call_function(aten.linear.default, tuple(args))
            vals = [u.meta["val"] for u in users]
            with vals[0].fake_mode:  # shapes may be symbolic: compute the result's meta in fake mode
                out.meta["val"] = torch.cat(vals, dim=-1)
            pieces, start = [], 0
            for u, (w, _) in zip(users, parts):
                end = start + w.shape[0]
                piece = g.graph.call_function(aten.slice.Tensor, (out, -1, start, end))
                piece.meta["val"] = u.meta["val"]
                pieces.append(piece)
                start = end
        # Erase only after inserting: `first` is the insertion point above.
        for u, piece in zip(users, pieces):
            u.replace_all_uses_with(piece)
            g.graph.erase_node(u)
        fused += 1
    if fused:
        g.notes.append(f"fused {fused} group(s) of sibling linears")


def _register(g: LoweringGraph, name: str, value: torch.Tensor) -> str:
    g.gm.register_buffer(name, value)
    return name
