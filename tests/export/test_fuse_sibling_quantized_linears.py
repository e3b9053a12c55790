"""fuse_sibling_quantized_linears: ember::quantized_linear calls on the same input with the same
scheme become one call over the stacked weights; calls with another scheme stay apart; the
program's outputs are bit-identical to the unfused program's (rows are independent and the
dynamic activation quantization is per token of the shared input)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.export import Dim

from ember.export import LoweringConfig, lower
from ember.export.quant_ops import ActQuant, pack_int4
from ember.quant.modules import QuantizedLinear, QuantizedWeight
from tests.helpers import assert_close, export, to_ember

QLINEAR = "ember::quantized_linear.default"
SKIP = LoweringConfig(skip_passes=frozenset({"fuse_sibling_quantized_linears"}))


def _weight(gen: torch.Generator, n: int, k: int, bits: int, gs: int, *, zero_point: bool = False,
            offset: bool = False, scale_dtype: torch.dtype = torch.float32) -> QuantizedWeight:
    lo, hi = (-8, 7) if bits == 4 else (-128, 127)
    q = torch.randint(lo, hi + 1, (n, k), generator=gen, dtype=torch.int8)
    scale = (torch.rand(n, k // gs, generator=gen) * 0.02 + 0.001).to(scale_dtype)
    zp = torch.randint(lo, hi + 1, (n, k // gs), generator=gen, dtype=torch.int8) if zero_point else None
    off = (torch.randn(n, k // gs, generator=gen) * 0.01).to(scale_dtype) if offset else None
    return QuantizedWeight(pack_int4(q) if bits == 4 else q, scale, zp, off, bits, gs)


def _ggml_q4_1(gen: torch.Generator, n: int, k: int) -> QuantizedWeight:
    """GGUF Q4_1's layout: one [1, 1] zero point for every group (q - (-8)), float offsets."""
    w = _weight(gen, n, k, 4, 32, offset=True, scale_dtype=torch.float16)
    return QuantizedWeight(w.qdata, w.scale, torch.full((1, 1), -8, dtype=torch.int8), w.offset, 4, 32)


class Attention(torch.nn.Module):
    """q/k/v and gate/up on the same input, as a decoder layer has them; `other` has another scheme."""

    def __init__(self, make, act: ActQuant, bias: bool) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        b = (lambda n: torch.randn(n, generator=gen) * 0.1) if bias else (lambda n: None)
        self.q = QuantizedLinear(make(gen, 64, 96), b(64), act)
        self.k = QuantizedLinear(make(gen, 32, 96), b(32), act)
        self.v = QuantizedLinear(make(gen, 32, 96), b(32), act)
        self.other = QuantizedLinear(_weight(gen, 16, 96, 8, 96), None, ActQuant.NONE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q(x) * 2, self.k(x), self.v(x) - 1, self.other(x)], dim=-1)


CASES = {
    "8da4w_g32_sym": (lambda g, n, k: _weight(g, n, k, 4, 32), ActQuant.INT8_ASYM_PER_TOKEN, False),
    "8da8w_per_channel_asym_bias": (lambda g, n, k: _weight(g, n, k, 8, k, zero_point=True),
                                    ActQuant.INT8_ASYM_PER_TOKEN, True),
    "4w_g32_fp16_asym": (lambda g, n, k: _weight(g, n, k, 4, 32, zero_point=True, scale_dtype=torch.float16),
                         ActQuant.NONE, False),
    "gguf_q4_1": (_ggml_q4_1, ActQuant.NONE, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_siblings_become_one_call_with_identical_outputs(case: str, tmp_path: Path) -> None:
    m = Attention(*CASES[case]).eval()
    x = torch.randn(1, 5, 96)
    ep = export(m, (x,), ({1: Dim("t", min=1, max=8)},))
    fused, unfused = lower(ep), lower(ep, config=SKIP)
    assert fused.method_stats("forward")["ops"][QLINEAR] == 2  # q+k+v, and `other`
    assert unfused.method_stats("forward")["ops"][QLINEAR] == 4
    assert "sibling quantized" in fused.metadata["export.notes"]
    # The stacked tensors replace the originals: the file does not grow.
    assert fused.size <= unfused.size + 4096
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    prog_fused, prog_unfused = to_ember(ep, tmp_path / "a"), to_ember(ep, tmp_path / "b", config=SKIP)
    for t in (1, 5, 8):
        x = torch.randn(1, t, 96)
        (a,), (b,) = prog_fused.run("forward", x), prog_unfused.run("forward", x)
        assert (a == b).all()
        assert_close(a, m(x), rtol=1e-4, atol=1e-4)


def test_different_schemes_or_inputs_stay_apart(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(1)

    class Mixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = QuantizedLinear(_weight(gen, 16, 64, 4, 32), None, ActQuant.NONE)
            self.b = QuantizedLinear(_weight(gen, 16, 64, 4, 64), None, ActQuant.NONE)  # other group size
            self.c = QuantizedLinear(_weight(gen, 16, 64, 4, 32), None, ActQuant.INT8_ASYM_PER_TOKEN)  # other act
            self.d = QuantizedLinear(_weight(gen, 16, 64, 4, 32, zero_point=True), None, ActQuant.NONE)  # has zp

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x) + self.c(x) + self.d(x) + self.a(x + 1)

    ops = lower(export(Mixed().eval(), (torch.randn(2, 64),))).method_stats("forward")["ops"]
    assert ops[QLINEAR] == 5
