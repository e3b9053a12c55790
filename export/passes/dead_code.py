"""Remove nodes whose results nothing uses (the graph is functional, so this is safe)."""

from __future__ import annotations

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass


@register_pass("dead_code")
def dead_code(g: LoweringGraph, ctx: PassContext) -> None:
    removed = g.remove_dead_nodes()
    if removed:
        g.notes.append(f"removed {removed} dead node(s)")
