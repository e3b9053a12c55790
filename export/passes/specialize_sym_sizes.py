"""Replace `sym_size` of static dims by their constant, so only truly dynamic sizes are computed
at run time (the rest of the symbolic-int ops are emitted as `sym::*` kernels)."""

from __future__ import annotations

import torch

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass


@register_pass("specialize_sym_sizes")
def specialize_sym_sizes(g: LoweringGraph, ctx: PassContext) -> None:
    for node in list(g.graph.nodes):
        if node.op != "call_function" or node.target != torch.ops.aten.sym_size.int:
            continue
        val = node.args[0].meta.get("val")
        size = val.shape[node.args[1]] if isinstance(val, torch.Tensor) else None
        if isinstance(size, int):
            node.replace_all_uses_with(size)
            g.graph.erase_node(node)
