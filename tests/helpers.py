"""Shared test helpers: export a module, lower it, save/load the file, run it on the runtime."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

import ember.runtime
from ember.export import lower


def export(module: torch.nn.Module, args: Sequence[Any], dynamic_shapes: Any = None) -> torch.export.ExportedProgram:
    return torch.export.export(module.eval(), tuple(args), dynamic_shapes=dynamic_shapes, strict=False)


# Set by the tests that rerun other tests' files at each forced kernel level (test_isa_paths.py,
# tests/backends/test_cpu_delegate.py): a folder the runs at every level share.
LOWERED_DIR_ENV = "EMBER_TEST_LOWERED_DIR"
_lowered_calls: dict[str, int] = {}


def lowered_file(path: Path, write: Callable[[Path], None]) -> Path:
    """The file `write(path)` makes. Under EMBER_TEST_LOWERED_DIR the first run of a test writes it
    there (by the test's id and the file's name) and the runs at the other kernel levels load that
    same file: a file does not depend on the level it is made on (as a deployed file meets every
    CPU path), and lowering took most of each level's run."""
    shared = os.environ.get(LOWERED_DIR_ENV)
    if not shared:
        write(path)
        return path
    test_id = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]  # "file::test[params]"
    cached = Path(shared) / hashlib.sha1(test_id.encode()).hexdigest() / path.name
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial")
        write(partial)
        partial.rename(cached)
    return cached


def to_ember(programs: Any, tmp_path: Any = None, **lower_kwargs: Any) -> ember.runtime.Program:
    """Lowers, saves to a file, and loads the file with the runtime. Without `tmp_path` the file
    goes to a temporary folder removed once it is loaded (the runtime holds its own copy or map).
    Under EMBER_TEST_LOWERED_DIR, a test's n-th file is the one its first run lowered (lowered_file)."""
    if os.environ.get(LOWERED_DIR_ENV):
        test_id = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
        n = _lowered_calls[test_id] = _lowered_calls.get(test_id, 0) + 1
        path = lowered_file(Path(f"model-{n}.ember"), lambda out: lower(programs, **lower_kwargs).save(out))
        return ember.runtime.load(path)
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
