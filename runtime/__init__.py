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
from ember._lazy import lazy_attributes

# The program API (numpy in and out) is imported on first use: ember.load's text runner and the
# process settings do not need numpy, whose import alone is ~16 MiB of resident memory.
_LAZY = {
    "Program": "ember.runtime.program",
    "load": "ember.runtime.program",
    **{name: "ember.runtime.process" for name in (
        "backend_ids", "core_round_trip_ns", "cpu_info", "get_memory_limit", "get_num_threads", "kernel_names",
        "max_num_threads", "set_memory_limit", "set_num_threads")},
}
__getattr__ = lazy_attributes(__name__, _LAZY)

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
    "core_round_trip_ns",
    "cpu_info",
    "get_memory_limit",
    "get_num_threads",
    "kernel_names",
    "load",
    "max_num_threads",
    "set_memory_limit",
    "set_num_threads",
]
