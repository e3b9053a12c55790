"""Group the nodes each partitioner supports into subgraphs (maximal runs in program order, so
every subgraph can run as one instruction without reordering)."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch.fx import Node

from ember.export.backend import Partitioner, Subgraph
from ember.export.graph import LoweringGraph, shape_bounds


@dataclass
class Partition:
    partitioner: Partitioner
    subgraph: Subgraph


def partition(g: LoweringGraph, partitioners: tuple[Partitioner, ...]) -> list[Partition]:
    """Returns partitions in program order. A node goes to the first partitioner that supports it."""
    if not partitioners:
        return []
    owner: dict[Node, int] = {}
    for node in g.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:  # follows its producer
            src = node.args[0]
            if src in owner:
                owner[node] = owner[src]
            continue
        for k, p in enumerate(partitioners):
            if p.supports(node, g.constants):
                owner[node] = k
                break
    runs: list[tuple[int, list[Node]]] = []
    for node in g.graph.nodes:
        if node.op != "call_function":
            continue
        k = owner.get(node)
        if k is None:
            if runs and runs[-1][1]:
                runs.append((-1, []))
            continue
        cap = partitioners[k].max_subgraph_nodes
        if runs and runs[-1][0] == k and runs[-1][1] and (
                cap is None or node.target is operator.getitem  # a getitem stays with its producer
                or sum(n.target is not operator.getitem for n in runs[-1][1]) < cap):
            runs[-1][1].append(node)
        else:
            runs.append((k, [node]))
    result = []
    output_node = next(n for n in g.graph.nodes if n.op == "output")
    for k, nodes in runs:
        if k < 0 or not nodes:
            continue
        members = set(nodes)
        inputs: list[Node] = []
        constants: dict[Node, torch.Tensor] = {}
        for n in nodes:
            for a in n.all_input_nodes:
                if a in members:
                    continue
                if a in g.constants:
                    constants[a] = g.constants[a]
                elif a not in inputs:
                    inputs.append(a)
        outputs = [n for n in nodes
                   if any(u not in members or u is output_node for u in n.users)
                   and isinstance(n.meta.get("val"), torch.Tensor)]
        max_shapes = {n: shape_bounds(n.meta["val"].shape, g.range_constraints, f"node '{n.name}'")[0]
                      for n in nodes + inputs if isinstance(n.meta.get("val"), torch.Tensor)}
        names = {c: g.constant_names[c] for c in constants if c in g.constant_names}
        result.append(Partition(partitioners[k], Subgraph(nodes, inputs, outputs, constants, max_shapes, names)))
    return result
