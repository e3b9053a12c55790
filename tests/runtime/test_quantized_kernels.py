"""The runtime's ember::quantized_linear / ember::quantized_embedding kernels against their Python
reference (export/quant_ops.py) and against torchao's eager math.

Each case exports a small module whose forward calls the canonical ops on registered buffers,
lowers it to a file and runs it on the runtime. One module holds many weight variants (bits,
group size, zero point / offset kind, scale dtype, activation quantization, bias, N) applied to
the same input, so a few exports cover the matrix. Weights and inputs are seeded.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import ember.runtime
# Importing quant_ops registers torch.ops.ember.quantized_linear / quantized_embedding.
from ember.export.quant_ops import (ActQuant, dequantize_weight, pack_int4, quantize_activation_per_group,
                                   quantize_activation_per_token)
from tests.helpers import export, to_ember

ZP_KINDS = ("none", "int8", "float", "q4_1", "bcast_float")
SCALE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
N_CHOICES = (1, 7, 49, 100)

# Largest error relative to max |reference output|.
TOL_WEIGHT_ONLY = 1e-5
TOL_ACT_QUANT = 1e-4
TOL_BF16 = 8e-3  # outputs rounded to bf16: one ulp at the largest value is 2^-8
TOL_F16 = 2e-3   # outputs rounded to fp16: one ulp at the largest value is 2^-11


TAIL_GROUP_ROWS = (40, 72, 160)  # row lengths that also cycle through small groups


def group_sizes(K: int) -> list[int]:
    """Group sizes to cycle through for rows of K: 32/64/128 where they divide K and per-channel;
    rows in TAIL_GROUP_ROWS also take the small groups (20, 24, 36, 8) dividing them, which leave
    16-wide and scalar tails in the SIMD kernels."""
    sizes = [g for g in (32, 64, 128) if K % g == 0] + [K]
    if K in TAIL_GROUP_ROWS:
        sizes += [g for g in (20, 24, 36, 8) if K % g == 0 and g not in sizes]
    return sizes


def make_weight(gen: torch.Generator, N: int, K: int, bits: int, gs: int, zp_kind: str,
                scale_dtype: torch.dtype) -> dict:
    G = K // gs
    lo, hi = (-8, 8) if bits == 4 else (-128, 128)
    q = torch.randint(lo, hi, (N, K), generator=gen, dtype=torch.int8)  # [N, K] codes
    scale = (torch.rand(N, G, generator=gen) * 0.04 + 0.005).to(scale_dtype)  # [N, G]
    zp = offset = None
    if zp_kind == "int8":
        zr = (-8, 8) if bits == 4 else (-20, 21)
        zp = torch.randint(*zr, (N, G), generator=gen, dtype=torch.int8)
    elif zp_kind == "float":
        zp = (torch.rand(N, G, generator=gen) * 6 - 3).to(scale_dtype)
    elif zp_kind == "q4_1":  # GGUF Q4_1: (q + 8) * d + m
        zp = torch.full((1, 1), -8, dtype=torch.int8)
        offset = (torch.randn(N, G, generator=gen) * 0.05).to(scale_dtype)
    elif zp_kind == "bcast_float":
        zp = torch.full((1, 1), 0.75, dtype=torch.float32)
        offset = torch.full((1, 1), -0.01, dtype=scale_dtype)
    return {"q": q, "qdata": pack_int4(q) if bits == 4 else q, "scale": scale, "zero_point": zp, "offset": offset,
            "bits": bits, "group_size": gs}


class QLinears(torch.nn.Module):
    """forward(x) -> one quantized_linear output per weight variant."""

    def __init__(self, variants: list[dict]):
        super().__init__()
        self.specs = []
        for i, v in enumerate(variants):
            names = {}
            for key in ("qdata", "scale", "zero_point", "offset", "bias"):
                if v.get(key) is not None:
                    self.register_buffer(f"{key}_{i}", v[key])
                    names[key] = f"{key}_{i}"
            self.specs.append((names, v["bits"], v["group_size"], v["act_quant"]))

    def forward(self, x):
        outs = []
        for names, bits, gs, act in self.specs:
            t = {k: getattr(self, n) for k, n in names.items()}
            outs.append(torch.ops.ember.quantized_linear(
                x, t["qdata"], t["scale"], t.get("zero_point"), t.get("offset"), t.get("bias"), bits, gs, act))
        return tuple(outs)


def torchao_linear(x: torch.Tensor, v: dict) -> torch.Tensor:
    """torchao's eager math for a variant with an integer (or no) zero point and no offset."""
    from torchao.quantization.quant_primitives import (MappingType, choose_qparams_affine, dequantize_affine,
                                                       quantize_affine)

    qmin, qmax = (-8, 7) if v["bits"] == 4 else (-128, 127)
    w = dequantize_affine(v["q"], (1, v["group_size"]), v["scale"], v["zero_point"], torch.int8, qmin, qmax,
                          output_dtype=torch.float32)
    if v["act_quant"]:
        block = (1,) * (x.dim() - 1) + (x.shape[-1],)
        s, z = choose_qparams_affine(x, MappingType.ASYMMETRIC, block, torch.int8, -128, 127,
                                     zero_point_dtype=torch.int8)
        xq = quantize_affine(x, block, s, z, torch.int8, -128, 127)
        x = dequantize_affine(xq, block, s, z, torch.int8, -128, 127, output_dtype=x.dtype)
    bias = None if v.get("bias") is None else v["bias"].float()
    return torch.nn.functional.linear(x.float(), w, bias).to(x.dtype)


def rel_error(got, ref: torch.Tensor, floor: float = 0.0) -> float:
    """max |got - ref| relative to max |ref| (or to `floor` when that is larger)."""
    g = torch.from_numpy(np.asarray(got)).float()
    r = ref.detach().float()
    assert tuple(g.shape) == tuple(r.shape), f"shape {tuple(g.shape)} != {tuple(r.shape)}"
    assert torch.isfinite(g).all()
    return float((g - r).abs().max() / max(float(r.abs().max()), floor, 1e-30))


def quantized_input(x: torch.Tensor, v: dict) -> torch.Tensor:
    """The activations a variant's weight multiplies (quantize-dequantized per its act_quant)."""
    if v["act_quant"] == ActQuant.INT8_ASYM_PER_TOKEN:
        return quantize_activation_per_token(x)
    if v["act_quant"] == ActQuant.INT8_SYM_PER_GROUP:
        return quantize_activation_per_group(x, v["group_size"])
    return x


def magnitude(x: torch.Tensor, v: dict) -> float:
    """1% of the largest sum_k |x_k w_nk|: the floor of rel_error's scale, since one output (N = 1)
    can cancel to far below the size of the float rounding of its terms."""
    w = dequantize_weight(v["qdata"], v["scale"], v["zero_point"], v["offset"], v["bits"], v["group_size"])
    xs = quantized_input(x, v)
    return 0.01 * float((xs.float().abs().reshape(-1, w.shape[1]) @ w.abs().T).max())


def tolerance(x_dtype: torch.dtype, act_quant: int) -> float:
    if x_dtype != torch.float32:
        return TOL_BF16 if x_dtype == torch.bfloat16 else TOL_F16
    return TOL_ACT_QUANT if act_quant else TOL_WEIGHT_ONLY


def variants_for(K: int, seed: int, x_dtype: torch.dtype) -> list[dict]:
    """bits x act_quant x zero-point kind, cycling group size, scale dtype, N and bias."""
    gen = torch.Generator().manual_seed(seed)
    sizes = group_sizes(K)
    out = []
    for i, (bits, act, zp_kind) in enumerate(itertools.product((4, 8), (0, 1, 2), ZP_KINDS)):
        gs = sizes[(i + seed) % len(sizes)]
        if bits == 4 and gs % 2:
            gs = K
        N = N_CHOICES[(i + seed) % len(N_CHOICES)]
        v = make_weight(gen, N, K, bits, gs, zp_kind, SCALE_DTYPES[(i + seed) % len(SCALE_DTYPES)])
        v["act_quant"] = act
        v["bias"] = (torch.randn(N, generator=gen) * 0.1).to(x_dtype) if i % 2 == 0 else None
        out.append(v)
    return out


# (K, x shape, x dtype): K with remainders against 8/16/32-wide vectors, decode and prefill shapes.
LINEAR_CASES = [
    (32, (1, 32), torch.float32),
    (96, (1, 1, 96), torch.float32),
    (160, (1, 5, 160), torch.float32),
    (576, (1, 576), torch.float32),
    (576, (2, 3, 576), torch.bfloat16),
    (1536, (1, 1536), torch.float32),
    (1536, (1, 5, 1536), torch.float32),
    (40, (2, 3, 40), torch.float32),
    (40, (1, 40), torch.bfloat16),
    (72, (1, 72), torch.float32),
    (72, (1, 5, 72), torch.bfloat16),
    (160, (7, 160), torch.float32),
    (96, (1, 3, 96), torch.float16),
]


@pytest.mark.parametrize("K,shape,x_dtype", LINEAR_CASES, ids=[f"K{k}-{'x'.join(map(str, s))}-{str(d)[6:]}"
                                                            for k, s, d in LINEAR_CASES])
def test_quantized_linear_matches_reference_and_torchao(K, shape, x_dtype, tmp_path):
    seed = K + len(shape) * 7 + SCALE_DTYPES.index(x_dtype)
    gen = torch.Generator().manual_seed(1000 + seed)
    x = (torch.randn(*shape, generator=gen) * 2).to(x_dtype)
    variants = variants_for(K, seed, x_dtype)
    module = QLinears(variants)
    prog = to_ember(export(module, (x,)), tmp_path)
    got = prog.run("forward", x)
    refs = module(x)
    assert len(got) == len(refs) == len(variants)
    for g, ref, v in zip(got, refs, variants):
        what = (f"bits={v['bits']} gs={v['group_size']} act={v['act_quant']} N={v['scale'].shape[0]} "
                f"scale={v['scale'].dtype} zp={None if v['zero_point'] is None else tuple(v['zero_point'].shape)} "
                f"offset={v['offset'] is not None} bias={v['bias'] is not None}")
        tol, floor = tolerance(x_dtype, v["act_quant"]), magnitude(x, v)
        err = rel_error(g, ref, floor)
        assert err <= tol, f"runtime vs reference: {err:.3g} > {tol} ({what})"
        # torchao has no per-group symmetric activation scheme for linears (act_quant 2)
        if v["act_quant"] != 2 and v["offset"] is None and (v["zero_point"] is None or v["zero_point"].dtype == torch.int8):
            err = rel_error(g, torchao_linear(x, v), floor)
            assert err <= tol, f"runtime vs torchao: {err:.3g} > {tol} ({what})"


def test_quantized_linear_long_rows_stay_exact(tmp_path):
    """Per-channel rows longer than one int32 flush segment (65,536 codes), with activations and
    weights at the extremes (|q - zp| = 255 against -128 or -8), in int and float paths."""
    K = 65536 + 96
    x = torch.full((1, K), 3.0)
    x[0, 0] = 0.0  # lo = 0 -> zp = -128, every other code 127: a = 255
    x[0, 1::7] = 1.5
    variants = []
    for bits, act in itertools.product((4, 8), (0, 1, 2)):
        q = torch.full((3, K), -8 if bits == 4 else -128, dtype=torch.int8)
        q[1, ::3] = 7 if bits == 4 else 127
        variants.append({"q": q, "qdata": pack_int4(q) if bits == 4 else q,
                         "scale": torch.tensor([[0.01], [0.02], [0.03]]), "zero_point": None, "offset": None,
                         "bias": None, "bits": bits, "group_size": K, "act_quant": act})
    module = QLinears(variants)
    prog = to_ember(export(module, (x,)), tmp_path)
    for g, v in zip(prog.run("forward", x), variants):
        # Against float64: fp32 sums of 65K same-sign terms (eager torch's as well as the float
        # kernels') drift by a few 1e-5; the integer sums of the act_quant path are exact.
        w = dequantize_weight(v["qdata"], v["scale"], None, None, v["bits"], K).double()
        xs = quantized_input(x, v)
        assert rel_error(g, xs.double() @ w.T) <= (1e-6 if v["act_quant"] == 1 else 1e-4), (v["bits"], v["act_quant"])


def test_quantized_linear_act_quant_edge_rows(tmp_path):
    """Rows that are all zero (scale clamped to the smallest normal), all positive, all negative,
    a range below the clamp, or exact .5 ties of x / scale: the codes must match torch's rounding
    (half to even) exactly."""
    K = 64
    x = torch.randn(7, K)
    x[0] = 0.0
    x[1] = x[1].abs() + 0.1
    x[2] = -(x[2].abs() + 0.1)
    x[3] = torch.linspace(-1e-30, 1e-30, K)
    x[4] = (torch.arange(K) * 2 + 1) * 0.25  # with hi = 127.5: scale 0.5, x / scale = j + 0.5
    x[4, -1] = 127.5
    x[5] = -x[4]  # lo = -127.5: zp = 127, ties on the negative side
    x[6] = x[4] - 64.0  # [-63.75, 63.75]: zp = -128 - round(-127.5) = 0, a tie itself
    x[6, -1] = 63.75
    gen = torch.Generator().manual_seed(7)
    variants = []
    for bits in (4, 8):
        v = make_weight(gen, 9, K, bits, 32, "int8", torch.float32)
        v.update(act_quant=1, bias=None)
        variants.append(v)
    module = QLinears(variants)
    prog = to_ember(export(module, (x,)), tmp_path)
    for g, ref, v in zip(prog.run("forward", x), module(x), variants):
        assert rel_error(g, ref) <= TOL_ACT_QUANT
        assert rel_error(g, torchao_linear(x, v)) <= TOL_ACT_QUANT


# ---- embedding ------------------------------------------------------------------------------------

class QEmbedding(torch.nn.Module):
    def __init__(self, w: dict, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("qdata", w["qdata"])
        self.register_buffer("scale", w["scale"])
        self.register_buffer("zero_point", w["zero_point"])  # None stays None
        self.register_buffer("offset", w["offset"])
        self.bits, self.gs, self.dtype = w["bits"], w["group_size"], dtype

    def forward(self, indices):
        return torch.ops.ember.quantized_embedding(self.qdata, self.scale, self.zero_point, self.offset, indices,
                                                   self.bits, self.gs, self.dtype)


EMBEDDING_CASES = [
    (4, "none", torch.int64, (1, 6), torch.float32),
    (4, "q4_1", torch.int32, (6,), torch.bfloat16),
    (4, "int8", torch.int32, (1, 6), torch.float32),
    (8, "none", torch.int32, (6,), torch.float32),
    (8, "float", torch.int64, (1, 6), torch.bfloat16),
    (8, "int8", torch.int64, (6,), torch.float32),
]


@pytest.mark.parametrize("bits,zp_kind,index_dtype,index_shape,dtype", EMBEDDING_CASES)
def test_quantized_embedding_matches_reference(bits, zp_kind, index_dtype, index_shape, dtype, tmp_path):
    gen = torch.Generator().manual_seed(bits * 10 + len(index_shape))
    w = make_weight(gen, 50, 96, bits, 32, zp_kind, torch.bfloat16 if dtype == torch.bfloat16 else torch.float16)
    module = QEmbedding(w, dtype)
    idx = torch.tensor([0, 49, 3, 3, 17, 48], dtype=index_dtype).reshape(index_shape)
    prog = to_ember(export(module, (idx,)), tmp_path)
    for indices in (idx, torch.tensor([5, 1, 0, 49, 2, 2], dtype=index_dtype).reshape(index_shape)):
        (got,) = prog.run("forward", indices)
        ref = module(indices)
        assert ref.dtype == dtype
        assert rel_error(got, ref) <= (TOL_BF16 if dtype == torch.bfloat16 else 1e-6)


# ---- corrupted arguments ---------------------------------------------------------------------------

def test_quantized_embedding_rejects_out_of_range_index(tmp_path):
    w = make_weight(torch.Generator().manual_seed(0), 50, 64, 4, 32, "none", torch.float32)
    prog = to_ember(export(QEmbedding(w, torch.float32), (torch.tensor([[1, 2, 3]]),)), tmp_path)
    for bad in (50, -1):
        with pytest.raises(ember.runtime.InvalidArgumentError, match=f"index {bad} .*out of range.*50 rows"):
            prog.run("forward", torch.tensor([[1, bad, 3]]))
    (ok,) = prog.run("forward", torch.tensor([[1, 49, 3]]))  # the program still runs afterwards
    assert ok.shape == (1, 3, 64)


def test_quantized_linear_rejects_mismatched_scale(tmp_path):
    w = make_weight(torch.Generator().manual_seed(0), 7, 96, 8, 32, "none", torch.float32)
    w.update(scale=torch.rand(7, 2), act_quant=0, bias=None)  # 96 / 32 = 3 groups, not 2
    x = torch.randn(1, 96)
    prog = to_ember(export(QLinears([w]), (x,)), tmp_path)
    with pytest.raises(ember.runtime.InvalidArgumentError, match=r"scale must be \[7, 3\].*\[7, 2\]"):
        prog.run("forward", x)


@pytest.mark.parametrize("field,value,message", [
    ("act_quant", 3, "act_quant must be 0 .* got 3"),
    ("group_size", 5, "group_size 5 must be positive and divide the row length 96"),
    ("bits", 3, "bits must be 4 or 8, got 3"),
])
def test_quantized_linear_rejects_bad_scheme(field, value, message, tmp_path):
    w = make_weight(torch.Generator().manual_seed(0), 7, 96, 8, 32, "none", torch.float32)
    w.update(act_quant=0, bias=None)
    w[field] = value
    x = torch.randn(1, 96)
    prog = to_ember(export(QLinears([w]), (x,)), tmp_path)
    with pytest.raises(ember.runtime.InvalidArgumentError, match=message):
        prog.run("forward", x)
