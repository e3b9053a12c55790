"""Small helpers the fusion passes share to match op chains in an FX graph."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.fx import Node


def call(node: Any, *targets: Any) -> bool:
    """`node` is a call to one of `targets`."""
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def val(node: Any) -> Any:
    """The example value (FakeTensor) recorded for `node`, or None."""
    return node.meta.get("val") if isinstance(node, Node) else None


def dtype(node: Any) -> torch.dtype | None:
    v = val(node)
    return v.dtype if isinstance(v, torch.Tensor) else None


def only_user(node: Node, user: Node) -> bool:
    """`user` is the single consumer of `node`, so `node` may be folded into a fused op."""
    return list(node.users) == [user]


def last_dim(node: Any, dim: Any) -> bool:
    """`dim` names the last dim of `node`'s value (as -1 or as rank - 1)."""
    v = val(node)
    return isinstance(v, torch.Tensor) and isinstance(dim, int) and dim in (-1, v.dim() - 1)


def static_size(node: Any, d: int) -> int | None:
    """Size of dim `d` of `node` when it is a plain int (not symbolic)."""
    v = val(node)
    if not isinstance(v, torch.Tensor) or not -v.dim() <= d < v.dim():
        return None
    s = v.shape[d]
    return s if isinstance(s, int) else None


def last_dim_slice(node: Any, src: Node, start: int, end: int, size: int) -> bool:
    """`node` = src[..., start:end] along the last dim of size `size` (an end past it counts as it)."""
    if not call(node, torch.ops.aten.slice.Tensor) or node.args[0] is not src or node.kwargs:
        return False
    args = list(node.args) + [None] * (5 - len(node.args))
    dim, s, e, step = args[1], args[2], args[3], args[4]
    s = 0 if s is None else s
    e = size if e is None or (isinstance(e, int) and e >= size) else e  # export writes "to the end" as a huge int
    return last_dim(src, dim) and s == start and e == end and step in (None, 1)


def other(node: Node, known: Node) -> Any:
    """The other operand of a binary call whose one operand is `known` (None when neither is)."""
    a, b = node.args[0], node.args[1]
    return b if a is known else a if b is known else None


def erased(node: Node) -> bool:
    """`node` was removed from its graph (lists of nodes taken before a rewrite may hold it)."""
    return bool(getattr(node, "_erased", False))


def replace(g_graph: torch.fx.Graph, old: Node, target: Any, args: tuple[Any, ...]) -> Node:
    """Inserts `target(*args)` before `old`, takes over its uses and meta, erases `old`."""
    with g_graph.inserting_before(old):
        new = g_graph.call_function(target, args)
    new.meta.update(old.meta)
    old.replace_all_uses_with(new)
    g_graph.erase_node(old)
    return new


def erase_dead(g_graph: torch.fx.Graph, nodes: list[Node]) -> None:
    """Erases those of `nodes` (in order) that are still in the graph and no longer have users."""
    for n in nodes:
        if not erased(n) and not n.users:
            g_graph.erase_node(n)


# A match: (the node the fused op replaces, the fused op's args, the chain nodes it makes dead).
Match = tuple[Node, tuple[Any, ...], list[Node]]


def rewrite_chains(g_graph: torch.fx.Graph, match: Callable[[Node], Match | None], target: Any) -> int:
    """Replaces every chain `match` recognizes with one call to `target`; returns how many."""
    count = 0
    for node in list(g_graph.nodes):
        if erased(node):  # a node a previous rewrite removed
            continue
        m = match(node)
        if m is None:
            continue
        old, args, chain = m
        replace(g_graph, old, target, args)
        erase_dead(g_graph, chain)
        count += 1
    return count
