"""Drop runtime assertions and shape-constraint ops: the runtime checks input bounds itself."""

from __future__ import annotations

import torch

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass

ASSERT_OPS = {
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten.sym_constrain_range.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten._assert_async.msg,
    torch.ops.aten._assert_async.default,
    torch.ops.aten._functional_assert_async.msg,
}


@register_pass("drop_asserts")
def drop_asserts(g: LoweringGraph, ctx: PassContext) -> None:
    dropped = 0
    for node in list(g.graph.nodes):
        if node.op == "call_function" and node.target in ASSERT_OPS:
            g.graph.erase_node(node)  # asserts have no users
            dropped += 1
    if dropped:
        g.notes.append(f"dropped {dropped} assertion(s)")
