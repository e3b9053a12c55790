"""The fusion passes (RMSNorm, residual add + RMSNorm, rotary embedding, SwiGLU) on small modules written the way HF
writes them: the chain becomes one op, and the program still equals eager PyTorch. The fused
ops' C++ kernels are also checked directly against their eager reference implementations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.export import Dim

from ember.export import LoweringConfig, fused_ops, lower
from tests.helpers import assert_close, export, to_ember

FUSIONS = frozenset({"fuse_rms_norm", "fuse_add_rms_norm", "fuse_rotary", "fuse_swiglu"})


def _ops(ep: torch.export.ExportedProgram, **kw: object) -> dict[str, int]:
    return lower(ep, **kw).method_stats("forward")["ops"]


class RMSNorms(torch.nn.Module):
    """Llama-style (weight * normed), Gemma-style (normed * (1 + weight)), no weight, and a
    half-precision input upcast before normalizing (only the fp32 core is fused there)."""

    def __init__(self, d: int = 24) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d))
        self.g = torch.nn.Parameter(torch.randn(d) * 0.1)

    @staticmethod
    def _norm(x: torch.Tensor, eps: float) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.w * self._norm(x, 1e-6)
        b = self._norm(a, 1e-5) * (1.0 + self.g)
        c = self._norm(b + 1, 1e-6)
        h = c.to(torch.bfloat16)
        d = self._norm(h.float(), 1e-6).to(torch.bfloat16) * self.w.to(torch.bfloat16)
        return c + d.float()


def test_fuse_rms_norm(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = RMSNorms().eval()
    ep = export(m, (torch.randn(2, 3, 24),), ({1: Dim("t", min=1, max=8)},))
    fused = _ops(ep)
    unfused = _ops(ep, config=LoweringConfig(skip_passes=frozenset({"fuse_rms_norm"})))
    assert fused.get("aten::rms_norm.default") == 4 and "aten::rsqrt.default" not in fused, fused
    assert "aten::rms_norm.default" not in unfused and unfused["aten::rsqrt.default"] == 4
    prog = to_ember(ep, tmp_path)
    for t in (1, 5, 8):
        x = torch.randn(2, t, 24)
        (out,) = prog.run("forward", x)
        assert_close(out, m(x), rtol=1e-2, atol=1e-2)  # bf16 rounding in the last term
        (out_a,) = to_ember(export(_First(m), (x,)), tmp_path).run("forward", x)
        assert_close(out_a, _First(m)(x), rtol=1e-5, atol=1e-5)


class PreNorm(torch.nn.Module):
    """Two pre-norm residual steps as HF's decoder layers write them: the residual stream h is
    normalized for a sublayer and read again by the next residual add (and returned)."""

    def __init__(self, d: int = 24) -> None:
        super().__init__()
        self.w1, self.w2 = torch.nn.Parameter(torch.randn(d)), torch.nn.Parameter(torch.randn(d))
        self.sub = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + r
        h2 = h + self.sub(self.w1 * RMSNorms._norm(h, 1e-6))
        return h2, self.w2 * RMSNorms._norm(h2, 1e-5)


def test_fuse_add_rms_norm(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = PreNorm().eval()
    x, r = torch.randn(2, 3, 24), torch.randn(2, 3, 24)
    ep = export(m, (x, r), ({1: Dim("t", min=1, max=8)}, {1: Dim("t", min=1, max=8)}))
    fused = _ops(ep)
    assert fused.get("ember::add_rms_norm.default") == 2 and "aten::rms_norm.default" not in fused, fused
    skip = LoweringConfig(skip_passes=frozenset({"fuse_add_rms_norm"}))
    assert _ops(ep, config=skip).get("aten::rms_norm.default") == 2
    (tmp_path / "fused").mkdir()
    (tmp_path / "unfused").mkdir()
    prog = to_ember(ep, tmp_path / "fused")
    unfused = to_ember(ep, tmp_path / "unfused", config=skip)
    for t in (1, 5, 8):
        x, r = torch.randn(2, t, 24), torch.randn(2, t, 24)
        outs = prog.run("forward", x, r)
        for out, want in zip(outs, m(x, r)):
            assert_close(out, want, rtol=1e-5, atol=1e-5)
        # the same bits as the add and the norm one after the other
        for out, alone in zip(outs, unfused.run("forward", x, r)):
            assert torch.equal(torch.as_tensor(out), torch.as_tensor(alone))


class _CallAddRmsNorm(torch.nn.Module):
    def __init__(self, weight: bool, eps: float | None) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16)) if weight else None
        self.eps = eps

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_ops.add_rms_norm(x, r, self.w, self.eps)


@pytest.mark.parametrize("weight,eps", [(True, 1e-5), (False, None)])
def test_add_rms_norm_kernel(weight: bool, eps: float | None, tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = _CallAddRmsNorm(weight, eps)
    x, r = torch.randn(3, 7, 16) * 3, torch.randn(3, 7, 16)
    outs = to_ember(export(m, (x, r)), tmp_path).run("forward", x, r)
    for out, want in zip(outs, m(x, r)):
        assert_close(out, want, rtol=1e-5, atol=1e-5)


def test_add_rms_norm_kernel_rejects_bad_shapes(tmp_path: Path) -> None:
    import ember.runtime

    x = torch.randn(2, 16)
    dims = ({0: Dim("n", min=1, max=4)}, {0: Dim("m", min=1, max=4)})
    prog = to_ember(export(_CallAddRmsNorm(True, 1e-5), (x, torch.randn(3, 16)), dims), tmp_path)
    with pytest.raises(ember.runtime.InvalidArgumentError, match="must have one shape"):
        prog.run("forward", torch.randn(3, 16), x)


class _First(torch.nn.Module):
    """The fp32-only part of RMSNorms (a tight comparison)."""

    def __init__(self, m: RMSNorms) -> None:
        super().__init__()
        self.m = m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.m.w * self.m._norm(x, 1e-6)
        return self.m._norm(a, 1e-5) * (1.0 + self.m.g)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(torch.nn.Module):
    """HF's apply_rotary_pos_emb on q and k, plus a partial rotary (Phi-3 style) on a slice."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [B, 1, T, D]
        q2 = q * cos + _rotate_half(q) * sin
        k2 = (k * cos) + (_rotate_half(k) * sin)
        rot, rest = k2[..., :8], k2[..., 8:]
        c8, s8 = cos[..., :8], sin[..., :8]
        partial = torch.cat([rot * c8 + _rotate_half(rot) * s8, rest], dim=-1)
        return q2.sum(1, keepdim=True) + partial


def test_fuse_rotary(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Rotary()
    t = Dim("t", min=1, max=8)
    args = (torch.randn(1, 4, 3, 16), torch.randn(1, 2, 3, 16), torch.randn(1, 3, 16), torch.randn(1, 3, 16))
    ep = export(m, args, ({2: t}, {2: t}, {1: t}, {1: t}))
    fused = _ops(ep)
    assert fused.get("ember::rotary_embedding.default") == 3 and "aten::neg.default" not in fused, fused
    assert "ember::rotary_embedding.default" not in _ops(ep, config=LoweringConfig(skip_passes=FUSIONS))
    prog = to_ember(ep, tmp_path)
    for n in (1, 6):
        xs = (torch.randn(1, 4, n, 16), torch.randn(1, 2, n, 16), torch.randn(1, n, 16), torch.randn(1, n, 16))
        (out,) = prog.run("forward", *xs)
        assert_close(out, m(*xs), rtol=1e-5, atol=1e-5)


class SwiGLU(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate, self.up = torch.nn.Linear(12, 20, bias=False), torch.nn.Linear(12, 20, bias=False)
        self.down = torch.nn.Linear(20, 12, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


def test_fuse_swiglu(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = SwiGLU().eval()
    ep = export(m, (torch.randn(1, 3, 12),), ({1: Dim("t", min=1, max=8)},))
    fused = _ops(ep)
    assert fused.get("ember::swiglu.default") == 1 and "aten::silu.default" not in fused, fused
    # Without the sibling-linear fusion there is no [gate | up] tensor to split: nothing to fuse.
    assert "ember::swiglu.default" not in _ops(ep, config=LoweringConfig(
        skip_passes=frozenset({"fuse_sibling_linears"})))
    prog = to_ember(ep, tmp_path)
    for n in (1, 8):
        x = torch.randn(1, n, 12)
        (out,) = prog.run("forward", x)
        assert_close(out, m(x), rtol=1e-5, atol=1e-6)


class _CallRotary(torch.nn.Module):
    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return fused_ops.rotary_embedding(x, cos, sin)


class _CallSwiglu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_ops.swiglu(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cos_shape", [(1, 1, 5, 32), (5, 32), (2, 3, 5, 32), (2, 1, 1, 32)])
def test_rotary_kernel(dtype: torch.dtype, cos_shape: tuple[int, ...], tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 32).to(dtype)
    cos, sin = torch.randn(cos_shape).to(dtype), torch.randn(cos_shape).to(dtype)
    (out,) = to_ember(export(_CallRotary(), (x, cos, sin)), tmp_path).run("forward", x, cos, sin)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert_close(out, fused_ops.rotary_embedding(x, cos, sin), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1, 6), (3, 7, 64), (2, 64, 1024)])
def test_swiglu_kernel(dtype: torch.dtype, shape: tuple[int, ...], tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = (torch.randn(shape) * 4).to(dtype)
    (out,) = to_ember(export(_CallSwiglu(), (x,)), tmp_path).run("forward", x)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert_close(out, fused_ops.swiglu(x), rtol=tol, atol=tol)


def test_rotary_kernel_rejects_bad_shapes(tmp_path: Path) -> None:
    import ember.runtime

    x, cos = torch.randn(1, 2, 3, 8), torch.randn(1, 1, 3, 8)
    prog = to_ember(export(_CallRotary(), (x, cos, cos), (None, None, {3: Dim("d", min=2, max=8)})), tmp_path)
    with pytest.raises(ember.runtime.InvalidArgumentError, match="does not broadcast"):
        prog.run("forward", x, torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 4))


class _LastRow(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x[:, -1:] * 2)[:, -1] + x[:, 0]  # the first select is on a size-1 dim, the second not


def test_select_on_a_size_one_dim_becomes_a_view(tmp_path: Path) -> None:
    x = torch.randn(2, 5, 7)
    ep = export(_LastRow(), (x,))
    ops = _ops(ep)
    assert ops.get("aten::select.int") == 1 and ops.get("aten::squeeze.dim") == 1, ops
    (out,) = to_ember(ep, tmp_path).run("forward", x)
    assert_close(out, _LastRow()(x))
