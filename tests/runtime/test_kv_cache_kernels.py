"""The KV cache dtypes' kernels against their Python references (llm/ops.py): ember::quantize_kv
bit for bit, ember::attend_cache_int8 and ember::attend_cache over fp16 caches (decode's split
path and prefill's GEMM tasks, windows, soft-capping, GQA)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ember.llm.ops  # noqa: F401  registers the ember ops
import ember.runtime
from tests.helpers import export, to_ember

torch.manual_seed(0)


class QuantizeKV(torch.nn.Module):
    def forward(self, x):
        return torch.ops.ember.quantize_kv(x)


def test_quantize_kv_is_bit_exact():
    x = torch.randn(1, 3, 7, 64) * torch.logspace(-3, 3, 7).reshape(1, 1, 7, 1)
    x[0, 0, 1] = 0.0  # an all-zero row: scale 0, codes 0
    x[0, 1, 2, 5] = float("nan")  # NaN / inf rows: scale NaN, codes 0
    x[0, 2, 3, 9] = float("-inf")
    # ties: x / s lands on .5 exactly (s = 127 / 127 = 1)
    x[0, 2, 4] = torch.tensor([127.0, 0.5, 1.5, 2.5, -0.5, -1.5] + [0.25] * 58)
    codes, scales = torch.ops.ember.quantize_kv(x)
    prog = to_ember(export(QuantizeKV(), (x,), ({2: torch.export.Dim("T", min=1, max=16)},)))
    got_codes, got_scales = prog.run("forward", x.numpy())
    assert got_codes.dtype == np.int8 and got_scales.shape == (1, 3, 7, 1)
    np.testing.assert_array_equal(got_codes, codes.numpy())
    np.testing.assert_array_equal(got_scales, scales.numpy())  # NaN == NaN here
    assert torch.isnan(scales[0, 1, 2]).all() and (codes[0, 1, 2] == 0).all()
    assert codes[0, 2, 4, :6].tolist() == [127, 0, 2, 2, 0, -2]  # half to even
    assert scales[0, 0, 1].item() == 0 and (codes[0, 0, 1] == 0).all()
    # dequantized rows are within half a step of the input
    finite = torch.isfinite(scales).expand_as(x)
    err = (codes.float() * scales - x).abs()[finite]
    assert (err <= (scales / 2).expand_as(x)[finite] * 1.0001).all()


class AttendInt8(torch.nn.Module):
    def __init__(self, D, window, softcap):
        super().__init__()
        self.args = (1 / math.sqrt(D), window, softcap)

    def forward(self, q, kc, ks, vc, vs, pos):
        return torch.ops.ember.attend_cache_int8(q, kc, ks, vc, vs, pos, *self.args)


class AttendFloat(AttendInt8):
    def forward(self, q, kc, vc, pos):
        return torch.ops.ember.attend_cache(q, kc, vc, pos, *self.args)


def _int8_cache(B, Hkv, S, D):
    codes, scales = torch.ops.ember.quantize_kv(torch.randn(B, Hkv, S, D))
    return codes, scales


@pytest.mark.parametrize("D,Hq,Hkv,S,window,softcap", [
    (64, 9, 3, 300, 0, 0.0), (40, 9, 3, 300, 0, 0.0), (64, 9, 3, 300, 50, 0.0), (64, 9, 3, 300, 0, 20.0),
    # The decode kernels take query heads 3 at a time, dims 8 (AVX2) or 16 (AVX-512) at a time and
    # up to 64 dims per pass: groups of 1, 4 (3 + 1) and 5 (3 + 2), dims with a remainder, a
    # second pass (72, 80), and (one thread) chunks past their 256-row blocks.
    (36, 4, 4, 300, 0, 0.0), (36, 8, 2, 300, 0, 0.0), (20, 10, 2, 600, 0, 0.0), (64, 2, 1, 700, 0, 0.0),
    (72, 6, 2, 300, 0, 0.0), (80, 4, 2, 300, 0, 0.0),
    # VNNI scores: 4 heads at a time (7 = 4 + 3), 64 codes per chunk (128; 200 = 3 chunks + 8).
    (128, 8, 2, 300, 0, 0.0), (200, 14, 2, 300, 0, 0.0)])
def test_attend_cache_int8(D, Hq, Hkv, S, window, softcap):
    """Decode (T = 1, split over threads in chunks) and prefill (T > 1) over an int8 cache equal the
    reference, which quantizes the queries like the cache's rows and attends over the dequantized
    fp32 rows."""
    B = 1
    kc, ks = _int8_cache(B, Hkv, S, D)
    vc, vs = _int8_cache(B, Hkv, S, D)
    module = AttendInt8(D, window, softcap)
    T = torch.export.Dim("T", min=1, max=32)
    example = (torch.randn(B, Hq, 4, D), kc, ks, vc, vs, torch.tensor([3]))
    prog = to_ember(export(module, example, ({2: T}, None, None, None, None, None)))
    threads = ember.runtime.get_num_threads()
    try:
        for t, p, n_threads in [(1, 0, threads), (1, 17, threads), (1, S - 1, threads), (1, S - 1, 1), (4, 3, threads),
                                (32, 100, threads), (7, S - 7, threads)]:
            ember.runtime.set_num_threads(n_threads)
            inputs = (torch.randn(B, Hq, t, D), kc, ks, vc, vs, torch.tensor([p]))
            expected = module(*inputs)
            got = prog.run("forward", *(x.numpy() for x in inputs))[0]
            torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-4, atol=1e-5)
    finally:
        ember.runtime.set_num_threads(threads)


def test_attend_cache_int8_refuses_mismatched_scales():
    B, Hq, Hkv, S, D = 1, 4, 2, 16, 8
    kc, ks = _int8_cache(B, Hkv, S, D)
    vc, vs = _int8_cache(B, Hkv, S, D)
    module = AttendInt8(D, 0, 0.0)
    prog = to_ember(export(module, (torch.randn(B, Hq, 1, D), kc, ks, vc, vs, torch.tensor([0]))))
    with pytest.raises(ember.runtime.InvalidArgumentError, match="input 2 of 'forward'"):
        prog.run("forward", torch.randn(B, Hq, 1, D).numpy(), kc.numpy(), ks[:, :, :8].numpy(), vc.numpy(),
                 vs.numpy(), np.array([0]))


@pytest.mark.parametrize("T,pos", [(1, 0), (1, 150), (1, 299), (16, 40)])
def test_attend_cache_fp16_cache(T, pos):
    """fp32 queries over an fp16 cache: the fast decode path converts blocks of rows on the fly."""
    B, Hq, Hkv, S, D = 1, 9, 3, 300, 64
    kc, vc = torch.randn(B, Hkv, S, D).half(), torch.randn(B, Hkv, S, D).half()
    module = AttendFloat(D, 0, 0.0)
    example = (torch.randn(B, Hq, 2, D), kc, vc, torch.tensor([0]))
    prog = to_ember(export(module, example, ({2: torch.export.Dim("T", min=1, max=16)}, None, None, None)))
    inputs = (torch.randn(B, Hq, T, D), kc, vc, torch.tensor([pos]))
    expected = module(*inputs)
    got = prog.run("forward", *(x.numpy() for x in inputs))[0]
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cache", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("B,D,Hq,Hkv,window,softcap", [
    # Prefill runs as two GEMMs per (batch row, kv head, block of query rows): 3 heads x 32 rows
    # fill 3 panels of 32, 1 head and 7 heads leave remainders; D 40 and 20 end V's 32-column panels
    # short; windows and soft-capping mask and bend each row on its own; B = 2 picks rows by batch.
    (1, 64, 9, 3, 0, 0.0), (1, 40, 7, 7, 0, 0.0), (2, 20, 8, 1, 0, 0.0), (1, 64, 9, 3, 70, 0.0),
    (1, 64, 4, 2, 0, 30.0)])
def test_attend_cache_prefill_blocks(cache, B, D, Hq, Hkv, window, softcap):
    """Prefill (T > 1) over fp32, fp16 and int8 caches equals the reference: query blocks from one
    row to the budget's, key ranges past one 64-row block and one 256-row V panel, one thread and
    all of them."""
    S = 600
    if cache == "int8":
        kc, ks = _int8_cache(B, Hkv, S, D)
        vc, vs = _int8_cache(B, Hkv, S, D)
        module, caches = AttendInt8(D, window, softcap), (kc, ks, vc, vs)
    else:
        dtype = torch.float16 if cache == "fp16" else torch.float32
        kc, vc = torch.randn(B, Hkv, S, D).to(dtype), torch.randn(B, Hkv, S, D).to(dtype)
        module, caches = AttendFloat(D, window, softcap), (kc, vc)
    T = torch.export.Dim("T", min=1, max=128)
    example = (torch.randn(B, Hq, 4, D), *caches, torch.tensor([3]))
    prog = to_ember(export(module, example, ({2: T},) + (None,) * (len(caches) + 1)))
    threads = ember.runtime.get_num_threads()
    try:
        for t, p, n_threads in [(2, 0, threads), (12, 41, threads), (128, 0, threads), (128, 0, 1), (100, 333, threads),
                                (128, S - 128, threads), (33, 300, 1)]:
            ember.runtime.set_num_threads(n_threads)
            inputs = (torch.randn(B, Hq, t, D), *caches, torch.tensor([p]))
            expected = module(*inputs)
            got = prog.run("forward", *(x.numpy() for x in inputs))[0]
            torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"T={t} pos={p} threads={n_threads}: {m}")
    finally:
        ember.runtime.set_num_threads(threads)
