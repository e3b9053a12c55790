"""The backend delegate interface end to end, with the reference backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.export import Dim

import ember.runtime
from ember.backends.reference import ReferencePartitioner
from ember.export import lower
from ember.fb.InstructionKind import InstructionKind
from tests.helpers import assert_close, export


class AddMulLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.fc(x + y) * y          # delegated: add, linear, mul
        h = torch.tanh(h)               # portable kernel in between
        return self.head(h * h)         # delegated again


def _lower(tmp_path: Path) -> tuple[ember.runtime.Program, dict]:
    torch.manual_seed(0)
    rows = Dim("rows", min=1, max=16)
    ep = export(AddMulLinear(), (torch.randn(4, 8), torch.randn(4, 8)), ({0: rows}, {0: rows}))
    program = lower(ep, partitioners=(ReferencePartitioner(),))
    path = tmp_path / "d.ember"
    program.save(path)
    return ember.runtime.load(path), program.method_stats("forward")


def test_delegated_program_matches_eager(tmp_path: Path) -> None:
    prog, stats = _lower(tmp_path)
    assert stats["delegated_nodes"] == {"ember.reference": 5}
    assert stats["ops"] == {"aten::tanh.default": 1}
    info = prog.method_info("forward")
    assert [k for k, _ in info["instructions"]] == ["delegate", "kernel", "delegate"]
    torch.manual_seed(0)
    m = AddMulLinear().eval()
    for rows in (1, 5, 16):
        x, y = torch.randn(rows, 8), torch.randn(rows, 8)
        (out,) = prog.run("forward", x, y)
        assert_close(out, m(x, y), rtol=1e-5, atol=1e-5)


def test_unregistered_backend_fails_to_load(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ep = export(AddMulLinear(), (torch.randn(4, 8), torch.randn(4, 8)))
    program = lower(ep, partitioners=(ReferencePartitioner(),))
    for m in program.root.methods:
        for d in m.delegates:
            d.backend = "acme.npu"
    path = tmp_path / "bad.ember"
    program.save(path)
    prog = ember.runtime.load(path)
    with pytest.raises(ember.runtime.NotFoundError, match="acme.npu.*not registered.*ember.reference"):
        prog.run("forward", torch.randn(4, 8), torch.randn(4, 8))


def test_partitioner_sees_only_supported_nodes() -> None:
    ep = export(AddMulLinear(), (torch.randn(4, 8), torch.randn(4, 8)))
    program = lower(ep, partitioners=(ReferencePartitioner(),))
    kinds = [ins.iType for ins in program.root.methods[0].instructions]
    assert kinds.count(InstructionKind.DelegateCall) == 2
