"""Backend delegate interfaces: a Partitioner picks nodes, BackendDetails turns them into a blob.

A backend named `id` must also have a C++ runtime `Backend` registered under the same id
(backends/<name>/runtime/*.cpp). At run time the delegate receives its inputs followed by its
planned outputs, in the order of `Subgraph.inputs` and `Subgraph.outputs`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.fx import Node


@dataclass(frozen=True)
class CompileSpec:
    key: str
    value: bytes


@dataclass
class Subgraph:
    """A connected run of nodes handed to one backend.

    `inputs` are the values the delegate receives at run time (user inputs, state, activations);
    constants read inside the subgraph are not inputs: their tensors are in `constants`, for the
    backend to pack into its blob. `max_shapes` gives every tensor node's upper-bound shape.
    """

    nodes: list[Node]
    inputs: list[Node]
    outputs: list[Node]
    constants: dict[Node, torch.Tensor] = field(default_factory=dict)
    max_shapes: dict[Node, list[int]] = field(default_factory=dict)
    constant_names: dict[Node, str] = field(default_factory=dict)  # constant -> its name in the source model


class BackendDetails(abc.ABC):
    """Ahead-of-time half of a backend."""

    id: str = ""

    @classmethod
    @abc.abstractmethod
    def preprocess(cls, subgraph: Subgraph, compile_specs: list[CompileSpec]) -> bytes:
        """Returns the blob the runtime backend's `init` receives."""

    @classmethod
    def subgraph_compile_specs(cls, subgraph: Subgraph) -> list[CompileSpec]:
        """Specs of this one subgraph, stored after the partitioner's own (default: none).

        What differs between calls that share a blob goes here: identical blobs are stored once
        in the file, so a backend that keeps its blob free of per-call details lets two calls
        (a tied embedding and lm_head) share one copy of the weights.
        """
        return []


class Partitioner(abc.ABC):
    """Chooses the nodes a backend takes over."""

    backend: type[BackendDetails]
    # The most nodes one subgraph may hold (None: whole runs of supported nodes in program order).
    max_subgraph_nodes: int | None = None

    def __init__(self, compile_specs: list[CompileSpec] | None = None):
        self.compile_specs = list(compile_specs or [])

    @abc.abstractmethod
    def supports(self, node: Node, constants: dict[Node, torch.Tensor]) -> bool:
        """True if the backend can run this call_function node (given which inputs are constants)."""

    def ops_to_not_decompose(self) -> list[torch._ops.OpOverload]:
        """Composite ops this backend wants to see whole (kept out of the decomposition table)."""
        return []


# Named backends for `export_llm(backend=...)` and `ember export --backend`: name -> factory of a
# configured Partitioner. Backend packages register themselves when imported (see BACKEND_MODULES).
_PARTITIONERS: dict[str, Callable[[], Partitioner]] = {}
BACKEND_MODULES = {"reference": "ember.backends.reference", "cpu": "ember.backends.cpu"}


def register_partitioner(name: str, factory: Callable[[], Partitioner]) -> None:
    _PARTITIONERS[name] = factory


@dataclass(frozen=True)
class BlobWeight:
    """One weight matrix a delegate blob holds, as `ember inspect` lists it."""

    name: str
    shape: tuple[int, int]  # [N, K]
    format: str  # e.g. "int4 g32 float16 scale"
    bytes: int  # what the file stores for it (the whole blob)


# Backend id -> module with `describe_blob(blob: bytes, specs: dict[str, bytes]) -> BlobWeight | None`,
# importable without torch (ember inspect runs where only the runtime is installed).
BLOB_INFO_MODULES = {"ember.cpu": "ember.backends.cpu.blob_info"}


def describe_blob(backend_id: str, blob: bytes, specs: dict[str, bytes]) -> BlobWeight | None:
    """What a delegate's blob holds, when its backend can say (None otherwise)."""
    import importlib

    module = BLOB_INFO_MODULES.get(backend_id)
    return None if module is None else importlib.import_module(module).describe_blob(blob, specs)


def get_partitioner(name: str) -> Partitioner:
    """The partitioner of backend `name` (importing its package on first use)."""
    import importlib

    if name not in _PARTITIONERS and name in BACKEND_MODULES:
        importlib.import_module(BACKEND_MODULES[name])
    if name not in _PARTITIONERS:
        known = ", ".join(sorted(set(_PARTITIONERS) | set(BACKEND_MODULES))) or "none"
        raise ValueError(f"unknown backend {name!r}; available: {known} (or None for the portable kernels)")
    return _PARTITIONERS[name]()
