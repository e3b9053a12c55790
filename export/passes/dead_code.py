"""Remove nodes whose results nothing uses (the graph is functional, so this is safe)."""

from __future__ import annotations

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass


@register_pass("dead_code")
def dead_code(g: LoweringGraph, ctx: PassContext) -> None:
    before = len(g.graph.nodes)
    changed = True
    while changed:
        changed = False
        for node in reversed(list(g.graph.nodes)):
            if node.op in ("call_function", "get_attr") and not node.users:
                g.graph.erase_node(node)
                g.constants.pop(node, None)
                changed = True
    removed = before - len(g.graph.nodes)
    if removed:
        g.notes.append(f"removed {removed} dead node(s)")
