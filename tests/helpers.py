"""Shared test helpers: export a module, lower it, save/load the file, run it on the runtime."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

import numpy as np
import torch

import ember.runtime
from ember.export import lower


def export(module: torch.nn.Module, args: Sequence[Any], dynamic_shapes: Any = None) -> torch.export.ExportedProgram:
    return torch.export.export(module.eval(), tuple(args), dynamic_shapes=dynamic_shapes, strict=False)


def to_ember(programs: Any, tmp_path: Any = None, **lower_kwargs: Any) -> ember.runtime.Program:
    """Lowers, saves to a file, and loads the file with the runtime. Without `tmp_path` the file
    goes to a temporary folder removed once it is loaded (the runtime holds its own copy or map)."""
    program = lower(programs, **lower_kwargs)
    if tmp_path is not None:
        path = os.path.join(str(tmp_path), "model.ember")
        program.save(path)
        return ember.runtime.load(path)
    with tempfile.TemporaryDirectory(prefix="ember-test-") as directory:
        path = os.path.join(directory, "model.ember")
        program.save(path)
        return ember.runtime.load(path)


def run_module(module: torch.nn.Module, args: Sequence[Any], dynamic_shapes: Any = None,
               tmp_path: Any = None, **lower_kwargs: Any) -> tuple[ember.runtime.Program, list[np.ndarray]]:
    prog = to_ember(export(module, args, dynamic_shapes), tmp_path, **lower_kwargs)
    return prog, prog.run("forward", *args)


def assert_close(actual: Any, expected: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    a = torch.from_numpy(np.asarray(actual))
    e = expected.detach()
    if e.dtype in (torch.float16, torch.bfloat16):
        e = e.float()
        a = a.float()
    assert tuple(a.shape) == tuple(e.shape), f"shape {tuple(a.shape)} != {tuple(e.shape)}"
    if e.dtype.is_floating_point:
        torch.testing.assert_close(a.to(e.dtype), e, rtol=rtol, atol=atol)
    else:
        assert torch.equal(a.to(e.dtype), e), f"{a} != {e}"
