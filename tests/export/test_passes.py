"""Each lowering pass on a small module: the program still equals eager, and the pass did its job."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.export import Dim

from ember.export import LoweringConfig, lower
from tests.helpers import assert_close, export, to_ember


class Siblings(torch.nn.Module):
    """q/k/v-style projections of one input (with bias) and an MLP-style gate/up pair (without)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = torch.nn.Linear(16, 16), torch.nn.Linear(16, 8), torch.nn.Linear(16, 8)
        self.gate, self.up = torch.nn.Linear(24, 32, bias=False), torch.nn.Linear(24, 32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.q(x), self.k(x) * self.v(x)], dim=-1) * 0.5
        return torch.nn.functional.silu(self.gate(h)) * self.up(h)


def test_fuse_sibling_linears(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Siblings().eval()
    t = Dim("t", min=1, max=8)
    ep = export(m, (torch.randn(1, 4, 16),), ({1: t},))
    fused = lower(ep).method_stats("forward")["ops"]["aten::linear.default"]
    unfused = lower(ep, config=LoweringConfig(skip_passes=frozenset({"fuse_sibling_linears"}))).method_stats(
        "forward")["ops"]["aten::linear.default"]
    assert (fused, unfused) == (2, 5)
    prog = to_ember(ep, tmp_path)
    for n in (1, 3, 8):
        x = torch.randn(1, n, 16)
        (out,) = prog.run("forward", x)
        assert_close(out, m(x), rtol=1e-5, atol=1e-6)


class Folding(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ (self.w.t() * 2).contiguous() + torch.arange(8.0)


def test_constant_folding_and_noops(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Folding().eval()
    ep = export(m, (torch.randn(3, 8),))
    program = lower(ep)
    ops = program.method_stats("forward")["ops"]
    assert not any(name.startswith(("aten::t.", "aten::permute", "aten::arange", "aten::clone")) for name in ops), ops
    assert "folded" in program.metadata["export.notes"]
    prog = to_ember(ep, tmp_path)
    x = torch.randn(3, 8)
    (out,) = prog.run("forward", x)
    assert_close(out, m(x), rtol=1e-5, atol=1e-5)
