"""ember.runtime: load and run .ember programs with the C++ runtime (no torch needed).

    prog = ember.runtime.load("model.ember")        # path or bytes
    prog.methods, prog.metadata
    outputs = prog.run("forward", *inputs)          # numpy arrays (or torch tensors) in and out
"""

from __future__ import annotations

from ember.runtime.errors import (
    EmberError,
    EmberIOError,
    InternalError,
    InvalidArgumentError,
    InvalidProgramError,
    NotFoundError,
    NotSupportedError,
    OutOfMemoryError,
)
from ember.runtime.program import (
    Program,
    backend_ids,
    cpu_info,
    get_memory_limit,
    get_num_threads,
    kernel_names,
    load,
    max_num_threads,
    set_memory_limit,
    set_num_threads,
)

__all__ = [
    "EmberError",
    "EmberIOError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidProgramError",
    "NotFoundError",
    "NotSupportedError",
    "OutOfMemoryError",
    "Program",
    "backend_ids",
    "cpu_info",
    "get_memory_limit",
    "get_num_threads",
    "kernel_names",
    "load",
    "max_num_threads",
    "set_memory_limit",
    "set_num_threads",
]
