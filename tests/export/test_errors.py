"""Clear failures: unsupported ops at export, bad inputs at run time."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.export import Dim

import ember.runtime
from ember.export import UnsupportedOpError, lower
from tests.helpers import export, to_ember


class UsesFFT(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x).abs() + 1


def test_unsupported_op_names_op_source_and_remedy() -> None:
    ep = export(UsesFFT(), (torch.randn(8),))
    with pytest.raises(UnsupportedOpError) as info:
        lower(ep)
    msg = str(info.value)
    assert "fft" in msg and "test_errors.py" in msg and "partitioner" in msg


def test_unbounded_dynamic_dim_is_refused() -> None:
    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    ep = export(Double(), (torch.randn(4),), ({0: Dim("n")},))
    with pytest.raises(Exception, match="no upper bound"):
        lower(ep)


@pytest.fixture
def prog(tmp_path: Path) -> ember.runtime.Program:
    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 3

    return to_ember(export(Scale(), (torch.randn(2, 4),), ({0: Dim("rows", min=1, max=6)},)), tmp_path)


def test_wrong_input_count(prog: ember.runtime.Program) -> None:
    with pytest.raises(ember.runtime.InvalidArgumentError, match="takes 1 inputs.*got 2"):
        prog.run("forward", torch.randn(2, 4), torch.randn(2, 4))


def test_wrong_dtype(prog: ember.runtime.Program) -> None:
    with pytest.raises(ember.runtime.InvalidArgumentError, match="must be float32, got int64"):
        prog.run("forward", torch.ones(2, 4, dtype=torch.int64))


def test_wrong_rank(prog: ember.runtime.Program) -> None:
    with pytest.raises(ember.runtime.InvalidArgumentError, match="rank 2, got 3"):
        prog.run("forward", torch.randn(1, 2, 4))


def test_dim_above_bound(prog: ember.runtime.Program) -> None:
    with pytest.raises(ember.runtime.InvalidArgumentError, match="dim 0 is 7, above its exported bound 6"):
        prog.run("forward", torch.randn(7, 4))


def test_static_dim_mismatch(prog: ember.runtime.Program) -> None:
    with pytest.raises(ember.runtime.InvalidArgumentError, match="dim 1 must be 4"):
        prog.run("forward", torch.randn(2, 5))


def test_unknown_method(prog: ember.runtime.Program) -> None:
    with pytest.raises(ember.runtime.NotFoundError, match="no method named 'decode'.*forward"):
        prog.run("decode", torch.randn(2, 4))


def test_not_an_ember_file(tmp_path: Path) -> None:
    f = tmp_path / "x.ember"
    f.write_bytes(b"hello world" * 10)
    with pytest.raises(ember.runtime.InvalidProgramError, match="not an .ember"):
        ember.runtime.load(f)
    with pytest.raises(ember.runtime.EmberIOError):
        ember.runtime.load(tmp_path / "missing.ember")
