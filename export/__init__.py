"""ember.export: the lowering stack (torch.export program -> .ember Program).

    from ember.export import lower, Program
    program = lower(torch.export.export(model, args), metadata={"my.key": 1})
    program.save("model.ember"); print(program.summary())

Torch is imported lazily: `Program` (reading/writing files) works without it, and nothing
beyond the errors is imported until it is used (the CLI registers `ember inspect` in every process).
"""

from __future__ import annotations

from ember._lazy import lazy_attributes

from ember.export.errors import ExportError, UnsupportedOpError

__all__ = ["BackendDetails", "CompileSpec", "ExportError", "LoweringConfig", "Partitioner", "Program", "Subgraph",
           "UnsupportedOpError", "lower"]

_LAZY = {
    "Program": "ember.export.program",  # flatbuffers, which imports numpy: only when a file is read
    "lower": "ember.export.lowering",
    "LoweringConfig": "ember.export.lowering",
    "BackendDetails": "ember.export.backend",
    "CompileSpec": "ember.export.backend",
    "Partitioner": "ember.export.backend",
    "Subgraph": "ember.export.backend",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
