"""Evaluate ops whose inputs are all constants at export time (e.g. weight transposes, RoPE tables
with static shapes) and store the result as a constant."""

from __future__ import annotations

import torch
from torch.fx import Node
from torch.utils._pytree import tree_flatten, tree_map

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass

# Ops that must run at run time even with constant inputs.
NEVER_FOLD = {
    torch.ops.aten.rand.default, torch.ops.aten.randn.default, torch.ops.aten.randint.default,
    torch.ops.aten.bernoulli.default, torch.ops.aten.empty.memory_format,
}


def _foldable(node: Node, g: LoweringGraph, ctx: PassContext) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if node.target in NEVER_FOLD or not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    leaves, _ = tree_flatten((node.args, node.kwargs))
    for leaf in leaves:
        if isinstance(leaf, Node) and leaf not in g.constants:
            return False
        if isinstance(leaf, torch.SymInt):
            return False
    val = node.meta["val"]
    if any(not isinstance(s, int) for s in val.shape):
        return False
    return val.numel() * val.element_size() <= ctx.fold_limit_bytes


@register_pass("constant_folding")
def constant_folding(g: LoweringGraph, ctx: PassContext) -> None:
    folded = 0
    for node in list(g.graph.nodes):
        if not _foldable(node, g, ctx):
            continue
        args, kwargs = tree_map(lambda a: g.constants[a] if isinstance(a, Node) else a, (node.args, node.kwargs))
        with torch.no_grad():
            value = node.target(*args, **kwargs)
        value = value.detach().contiguous()
        attr = f"_ember_folded_{node.name}"
        g.gm.register_buffer(attr, value)  # our own copy of the graph module; keeps the graph valid
        with g.graph.inserting_before(node):
            const = g.graph.get_attr(attr)
        const.meta["val"] = node.meta["val"]
        g.constants[const] = value
        node.replace_all_uses_with(const)
        g.graph.erase_node(node)
        folded += 1
    # Drop constants nothing reads any more.
    for node in list(g.constants):
        if not node.users and node.op == "get_attr":
            g.graph.erase_node(node)
            del g.constants[node]
    if folded:
        g.notes.append(f"folded {folded} constant op(s)")
