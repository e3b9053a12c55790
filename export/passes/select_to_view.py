"""`select(x, d, i)` on a dim of static size 1 is `squeeze(x, d)`: a view (an alias, no copy).

LLM programs select the last position of [1, 1, vocab] logits; as a copy that is a 200 KB memmove
per decoded token.
"""

from __future__ import annotations

import torch

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass
from ember.export.passes._match import call, replace, static_size

aten = torch.ops.aten


@register_pass("select_to_view")
def select_to_view(g: LoweringGraph, ctx: PassContext) -> None:
    if "aten::squeeze.dim" not in ctx.kernel_names:
        return
    rewritten = 0
    for node in list(g.graph.nodes):
        if not call(node, aten.select.int) or len(node.args) != 3 or node.kwargs:
            continue
        x, dim, index = node.args
        if not isinstance(dim, int) or static_size(x, dim) != 1 or index not in (0, -1):
            continue
        replace(g.graph, node, aten.squeeze.dim, (x, dim))
        rewritten += 1
    if rewritten:
        g.notes.append(f"turned {rewritten} select(s) on size-1 dims into views")
