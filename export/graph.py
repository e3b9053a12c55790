"""LoweringGraph: one method's FX graph with its inputs, constants, state and outputs classified."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import GraphModule, Node

from ember.export.errors import ExportError


@dataclass
class LoweringGraph:
    name: str
    gm: GraphModule
    inputs: list[Node]                               # user-input placeholders, in order
    constants: dict[Node, torch.Tensor]              # params, lifted constants, read-only buffers, folded values
    state: dict[Node, str]                           # placeholders of mutable buffers -> buffer name
    output_kinds: list[str | None]                   # per graph output: None (user output) or the buffer it updates
    range_constraints: dict[Any, Any]
    notes: list[str] = field(default_factory=list)   # what passes did, for the summary
    constant_names: dict[Node, str] = field(default_factory=dict)  # constant -> its state-dict name

    @property
    def graph(self) -> torch.fx.Graph:
        return self.gm.graph

    def remove_dead_nodes(self) -> int:
        """Erases unused call_function / get_attr nodes (and their constants) until none is left
        (the graph is functional, so this is safe); returns how many."""
        before = len(self.graph.nodes)
        changed = True
        while changed:
            changed = False
            for node in reversed(list(self.graph.nodes)):
                if node.op in ("call_function", "get_attr") and not node.users:
                    self.graph.erase_node(node)
                    self.constants.pop(node, None)
                    self.constant_names.pop(node, None)
                    changed = True
        return before - len(self.graph.nodes)

    def _outputs(self) -> list[Any]:
        # Read from the output node each time: passes replace the nodes that feed it.
        output_node = next(n for n in reversed(self.graph.nodes) if n.op == "output")
        return list(output_node.args[0])

    @property
    def user_outputs(self) -> list[Any]:
        """Nodes (or python constants) returned to the caller, in order."""
        return [v for v, kind in zip(self._outputs(), self.output_kinds) if kind is None]

    @property
    def mutations(self) -> list[tuple[Any, str]]:
        """(new value, buffer name) pairs written back to program state."""
        return [(v, kind) for v, kind in zip(self._outputs(), self.output_kinds) if kind is not None]


def build_lowering_graph(name: str, ep: ExportedProgram, mutable_buffers: set[str]) -> LoweringGraph:
    """Classifies placeholders and outputs of an exported program.

    `mutable_buffers` are the buffers mutated by any method of the program: they become program state
    (shared by every method), even in a method that only reads them.
    """
    sig = ep.graph_signature
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    state_dict = ep.state_dict
    inputs: list[Node] = []
    constants: dict[Node, torch.Tensor] = {}
    state: dict[Node, str] = {}
    names: dict[Node, str] = {}
    for spec in sig.input_specs:
        node = placeholders[spec.arg.name]
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(node.meta.get("val"), torch.Tensor):
                raise ExportError(
                    f"method '{name}': input '{node.name}' is a {type(node.meta.get('val')).__name__}; ember "
                    "methods take tensors only (pass scalars as 0-d or 1-element tensors)")
            inputs.append(node)
        elif spec.kind == InputKind.BUFFER and spec.target in mutable_buffers:
            state[node] = spec.target
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            value = state_dict[spec.target] if spec.target in state_dict else ep.constants[spec.target]
            constants[node] = value
            names[node] = spec.target
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            constants[node] = ep.constants[spec.target]
            names[node] = spec.target
        else:
            raise ExportError(f"method '{name}': input kind {spec.kind.name} ('{node.name}') is not supported")
    output_kinds: list[str | None] = []
    for spec in sig.output_specs:
        if spec.kind == OutputKind.USER_OUTPUT:
            output_kinds.append(None)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            output_kinds.append(spec.target)
        else:
            raise ExportError(
                f"method '{name}': output kind {spec.kind.name} is not supported (ember methods may mutate "
                "buffers, not their inputs: copy the input into a buffer instead)")
    return LoweringGraph(name, ep.graph_module, inputs, constants, state, output_kinds, dict(ep.range_constraints),
                         constant_names=names)


def shape_bounds(shape: Any, range_constraints: dict[Any, Any], where: str) -> tuple[list[int], list[bool]]:
    """Upper bound of every dim (exact for static dims) and whether it is dynamic."""
    import math

    from torch.utils._sympy.value_ranges import bound_sympy

    sizes, dynamic = [], []
    for d, s in enumerate(shape):
        if isinstance(s, int):
            sizes.append(int(s))
            dynamic.append(False)
            continue
        upper = bound_sympy(s.node.expr, range_constraints).upper
        try:
            finite = math.isfinite(float(upper))
        except TypeError:
            finite = False
        if not finite:
            raise ExportError(
                f"{where}: dim {d} ({s}) has no upper bound; export with bounded dynamic shapes, e.g. "
                "torch.export.Dim('T', min=1, max=128), so ember can plan its memory")
        sizes.append(int(upper))
        dynamic.append(True)
    return sizes, dynamic


def mutated_buffers(ep: ExportedProgram) -> set[str]:
    return {spec.target for spec in ep.graph_signature.output_specs if spec.kind == OutputKind.BUFFER_MUTATION}


def source_of(node: Node) -> str:
    """Where a node came from, for error messages: module path and the user's source line."""
    parts = []
    stack = node.meta.get("nn_module_stack")
    if stack:
        path, cls = list(stack.values())[-1]
        parts.append(f"module '{path}' ({cls.__name__ if isinstance(cls, type) else cls})")
    trace = node.meta.get("stack_trace")
    if trace:
        lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip()]
        frames = [ln for ln in lines if ln.startswith("File ")]
        if frames:
            parts.append(frames[-1] + (f": {lines[-1]}" if lines[-1] != frames[-1] else ""))
    return "; ".join(parts) or f"node '{node.name}'"


def op_name(target: Any) -> str:
    """'aten::add.Tensor' for an OpOverload; 'sym::mul' for python operators on symbolic ints."""
    if isinstance(target, torch._ops.OpOverload):
        name = target.name()  # "aten::add.Tensor", or "aten::relu" for the default overload
        return name if "." in name.split("::", 1)[-1] else f"{name}.default"
    from ember.export.sym_ops import SYM_OPS

    if target in SYM_OPS:
        return SYM_OPS[target]
    return getattr(target, "__name__", str(target))
