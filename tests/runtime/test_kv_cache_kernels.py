"""The KV cache dtypes' kernels against their Python references (llm/ops.py): ember::quantize_kv
bit for bit, ember::attend_cache_int8 and ember::attend_cache over fp16 caches (decode's split
path and prefill's GEMM tasks, windows, soft-capping, GQA)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

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
            # Decode rounds the P.V weights to int16 per block (runtime/kernels/i8_pv.h): up to
            # 1/65534 of a block's largest weight each, ~3e-5 here at most (the cache's own
            # rounding of V is ~1e-2).
            torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-4, atol=1e-4 if t == 1 else 1e-5)
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


_DECODE_AT_LEVEL = """
import sys
import numpy as np
import ember.runtime as r
r.set_num_threads(2)
prog, data = r.load(sys.argv[1]), np.load(sys.argv[2])
outs = [prog.run("forward", data["q"][i], data["kc"], data["ks"], data["vc"], data["vs"], data["pos"][i])[0]
        for i in range(len(data["pos"]))]
np.save(sys.argv[3], np.stack(outs))
print("LEVEL " + r.cpu_info()["kernels"]["f32.i8_weighted_rows"])
"""


@pytest.mark.parametrize("D,Hq,Hkv", [(40, 10, 2), (80, 4, 4), (64, 9, 3)])
def test_decode_over_an_int8_cache_agrees_at_every_level(D, Hq, Hkv, tmp_path):
    """Decode's P.V sums int16-rounded weights in integers (runtime/kernels/i8_pv.h), the same sums at
    every kernel level (what is left to differ is the softmax's and the chunk merge's fp32 rounding,
    ~1e-5 of a row's largest output here): blocks of 256 rows and a shorter last one, odd row counts, head
    groups of 3 + 2 and 1, 40 and 80 dims (masked and second column passes), and blocks that take the
    fp32 path (a kv head whose V rows are tiny; a NaN row, which must reach the outputs attending it)."""
    B, S = 1, 700
    kc, ks = _int8_cache(B, Hkv, S, D)
    vc, vs = _int8_cache(B, Hkv, S, D)
    vs[:, 0] *= 1e-33  # weights below kPvMinMax: the fp32 path
    vs[:, -1, 650] = float("nan")
    prog_path, data_path = tmp_path / "attend.ember", tmp_path / "inputs.npz"
    example = (torch.randn(B, Hq, 1, D), kc, ks, vc, vs, torch.tensor([3]))
    from ember.export import lower
    lower(export(AttendInt8(D, 0, 0.0), example)).save(str(prog_path))
    positions = [0, 1, 255, 256, 300, 513, 649, 650, 699]
    np.savez(data_path, q=torch.randn(len(positions), B, Hq, 1, D).numpy(), kc=kc.numpy(), ks=ks.numpy(),
             vc=vc.numpy(), vs=vs.numpy(), pos=np.array([[p] for p in positions]))
    best = ember.runtime.cpu_info()["best_isa"]
    levels = ["portable", "avx2", "avx512", "avx512vnni"]  # the attention kernels' levels (amx adds none)
    results = {}
    for level in levels[: levels.index(best) + 1 if best in levels else len(levels)]:
        out = tmp_path / f"{level}.npy"
        proc = subprocess.run([sys.executable, "-c", _DECODE_AT_LEVEL, str(prog_path), str(data_path), str(out)],
                              capture_output=True, text=True, env={**os.environ, "EMBER_KERNEL_ISA": level},
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"LEVEL {level}" in proc.stdout
        results[level] = np.load(out)
    reference = results["portable"]
    assert np.isnan(reference[positions.index(650):, 0, 0, -1]).all()  # the NaN row's head, from position 650 on
    assert np.isfinite(reference[: positions.index(650)]).all() and np.isfinite(reference[:, :, :, :-Hq // Hkv]).all()
    # Relative to each output row's largest value: the tiny head's outputs are ~1e-34, and a sum
    # that cancels leaves an output far below its row's others.
    scale = np.abs(np.nan_to_num(reference)).max(axis=-1, keepdims=True)
    scale[scale == 0] = 1
    for level, got in results.items():
        np.testing.assert_allclose(got / scale, reference / scale, rtol=0, atol=1e-4,
                                   err_msg=f"{level} differs from portable")


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
