"""`lower()`: exported programs -> one ember Program (normalize, passes, partition, emit, plan)."""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch.export import ExportedProgram

from ember.export.backend import Partitioner
from ember.export.dtypes import dtype_code, tensor_bytes
from ember.export.emitter import KernelInfo, MethodEmitter
from ember.export.errors import ExportError, UnsupportedOpError
from ember.export.graph import LoweringGraph, build_lowering_graph, mutated_buffers, op_name, source_of
from ember.export.partition import partition
from ember.export.passes import PassContext, run_passes
from ember.export.program import Program, SegmentTable, encode_metadata
from ember.fb.Program import ProgramT
from ember.fb.StateTensor import StateTensorT


@dataclass(frozen=True)
class LoweringConfig:
    """Knobs of the lowering stack.

    fold_limit_bytes: the largest tensor constant folding may create (bigger results are computed
        at run time instead, so the file does not grow).
    skip_passes: names of passes to skip (see ember.export.passes), for debugging.
    """

    fold_limit_bytes: int = 16 << 20
    skip_passes: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.fold_limit_bytes < 0:
            raise ValueError(f"fold_limit_bytes must be >= 0, got {self.fold_limit_bytes}")


def runtime_kernels() -> dict[str, KernelInfo]:
    from ember.runtime import _C

    out = {}
    for name in _C.kernel_names():
        info = _C.kernel_info(name)
        out[name] = KernelInfo(info["num_args"], info["num_outputs"], info["view"])
    return out


def normalize(ep: ExportedProgram, kernels: Mapping[str, KernelInfo],
              partitioners: tuple[Partitioner, ...]) -> ExportedProgram:
    """Decompose to core ATen, except ops the runtime (or a partitioner) implements whole and the
    patterns' ops the passes fuse (torchao's quantization primitives)."""
    from ember.export.passes import ops_the_passes_fuse

    table = torch.export.default_decompositions()
    keep = {op for p in partitioners for op in p.ops_to_not_decompose()} | ops_the_passes_fuse()
    for op in list(table.keys()):
        if op in keep or op_name(op) in kernels:
            del table[op]
    return ep.run_decompositions(table)


def check_supported(g: LoweringGraph, delegated: set[Any], kernels: Mapping[str, KernelInfo]) -> None:
    problems: dict[str, str] = {}
    for node in g.graph.nodes:
        if node.op != "call_function" or node in delegated or node.target is operator.getitem:
            continue
        name = op_name(node.target)
        if name not in kernels and name not in problems:
            problems[name] = source_of(node)
    if problems:
        lines = "\n".join(f"  - {name}, from {where}" for name, where in problems.items())
        raise UnsupportedOpError(
            f"method '{g.name}' uses operator(s) the ember runtime does not implement:\n{lines}\n"
            "Rewrite that part of the model with supported ops (see `ember.runtime.kernel_names()`), pass a "
            "partitioner whose backend handles them, or add a kernel under runtime/kernels/.")


def lower(programs: ExportedProgram | Mapping[str, ExportedProgram], *, partitioners: tuple[Partitioner, ...] = (),
          metadata: Mapping[str, Any] | None = None, config: LoweringConfig | None = None,
          progress: bool = False, export_started: float | None = None) -> Program:
    """Lowers one exported program (method 'forward') or a {method_name: program} dict to a Program.

    Buffers mutated by any method become program state shared by all methods and are updated in
    place. Dynamic dims are planned at the upper bounds given to torch.export.

    Records ``export.lowering_seconds`` (this call, decomposition included) and, when
    `export_started` (a ``time.perf_counter()`` value) is given, ``export.total_seconds`` from
    then to the end of lowering (loading, quantizing, torch.export and lowering; not the write).
    """
    t0 = time.perf_counter()
    config = config or LoweringConfig()
    if isinstance(programs, ExportedProgram):
        programs = {"forward": programs}
    if not programs:
        raise ExportError("lower() needs at least one exported program")
    for name, ep in programs.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ExportError(f"method name {name!r} must be a Python identifier (e.g. 'forward')")
        if not isinstance(ep, ExportedProgram):
            raise ExportError(f"method '{name}' is a {type(ep).__name__}; pass the result of torch.export.export")
    partitioners = tuple(partitioners)
    kernels = runtime_kernels()
    ctx = PassContext(frozenset(kernels), config.fold_limit_bytes)

    # torch.export gives non-functional IR; decomposition functionalizes it, which is what makes
    # buffer mutations visible in the graph signature.
    programs = {name: normalize(ep, kernels, partitioners) for name, ep in programs.items()}
    mutable: set[str] = set()
    for ep in programs.values():
        mutable |= mutated_buffers(ep)
    state_names = sorted(mutable)
    state_index = {n: i for i, n in enumerate(state_names)}
    segments = SegmentTable()
    state_init: dict[str, torch.Tensor] = {}
    for ep in programs.values():
        for n in state_names:
            if n not in state_init:
                sd = ep.state_dict if n in ep.state_dict else ep.constants
                if n in sd:
                    state_init[n] = sd[n]

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(programs), desc="lowering", unit="method", leave=False)
    methods = []
    notes: list[str] = []
    for name, ep in programs.items():
        g = build_lowering_graph(name, ep, mutable)
        run_passes(g, ctx, config.skip_passes)
        parts = partition(g, partitioners)
        delegated = {n for p in parts for n in p.subgraph.nodes}
        check_supported(g, delegated, kernels)
        emitter = MethodEmitter(g, parts, segments, state_index, kernels)
        methods.append(emitter.emit())
        notes.extend(f"{name}: {n}" for n in g.notes)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()

    root = ProgramT()
    root.methods = methods
    root.state = []
    for n in state_names:
        if n not in state_init:
            raise ExportError(f"state buffer '{n}' has no initial value in the exported program")
        t = state_init[n]
        st = StateTensorT()
        st.name = n
        st.dtype = dtype_code(t.dtype, f"state '{n}'")
        st.sizes = list(t.shape)
        st.initSegment = -1 if not bool(torch.any(t != 0)) else segments.add(tensor_bytes(t))
        root.state.append(st)
    md = dict(metadata or {})
    done = time.perf_counter()
    md.setdefault("export.lowering_seconds", round(done - t0, 3))
    if export_started is not None:
        md.setdefault("export.total_seconds", round(done - export_started, 3))
    if notes:
        md.setdefault("export.notes", "\n".join(notes))
    root.metadata = encode_metadata(md, segments)
    return Program(root, segments.segments)
