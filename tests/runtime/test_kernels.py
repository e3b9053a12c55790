"""Portable kernels against eager PyTorch: export -> lower -> file -> runtime.

Each case builds a tiny module around a function, runs it through the whole pipeline and
compares every output with eager PyTorch. Cases cover broadcasting, non-contiguous views in
the source module, each dtype, and dynamic dims at several sizes up to the bound.
"""

from __future__ import annotations

import math

import pytest
import torch

import ember.runtime
from tests.helpers import assert_close, export, to_ember

torch.manual_seed(0)

TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def check(fn, *args, dynamic_shapes=None, rtol=None, atol=None, more=(), module=None):
    """Runs fn through ember and compares with eager; `more` are extra input tuples for the
    same program (dynamic shapes)."""
    mod = module if module is not None else Fn(fn)
    prog = to_ember(export(mod, args, dynamic_shapes))
    for inputs in (tuple(args), *more):
        expected = mod(*inputs)
        outs = prog.run("forward", *inputs)
        if not isinstance(expected, (tuple, list)):
            expected = (expected,)
        flat = []
        for e in expected:  # max.dim & co. return (values, indices) pairs
            flat.extend(e if isinstance(e, tuple) else (e,))
        expected = flat
        assert len(outs) == len(expected)
        for got, exp in zip(outs, expected):
            if isinstance(exp, torch.Tensor):
                r, a = TOL.get(exp.dtype, (1e-5, 1e-5))
                assert_close(got, exp, rtol=rtol or r, atol=atol or a)
            else:
                assert got == exp
    return prog


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# ---- elementwise -----------------------------------------------------------------------------

BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub": lambda a, b: a - b,
    "rsub_alpha": lambda a, b: torch.sub(b, a, alpha=0.5),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "pow": lambda a, b: torch.pow(a.abs() + 0.5, b),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "remainder": lambda a, b: torch.remainder(a, b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast(name):
    fn = BINARY[name]
    a, b = rand(3, 1, 5), rand(4, 1) + 3.0
    check(fn, a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_binary_dtypes_and_scalars(dtype):
    a, b = rand(2, 33, dtype=dtype), rand(33, dtype=dtype)
    check(lambda x, y: ((x + y) * 0.5 - 3) / (y.abs() + 1) + x.pow(2) + 2 ** x.clamp(-2, 2), a, b)


def test_int_arithmetic():
    a = torch.randint(-50, 50, (4, 7))
    b = torch.randint(1, 9, (7,))
    check(lambda x, y: (x + y, x * y - 3, x // y, x % y, torch.div(x, y, rounding_mode="trunc"),
                        x / y, x * 1.5, x & y, x | 3, torch.maximum(x, y)), a, b)


def test_mixed_promotion():
    a = torch.randint(0, 10, (3, 4))
    b = rand(3, 4)
    m = torch.rand(3, 4) > 0.5
    check(lambda x, y, z: (x + y, y * z, x * z, z + z, x.float() - y.half().float()), a, b, m)


def test_non_contiguous_views():
    x, y = rand(5, 3, 4), rand(3, 5, 4)
    check(lambda a, b: (a.transpose(0, 1) + b, a.permute(2, 0, 1) * 2, b[:, 1:4:2] - 1,
                        a.expand(2, 5, 3, 4).sum(0), a[..., 2], a.narrow(1, 1, 2) + 0), x, y)


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": lambda x: torch.log(x.abs() + 1e-3),
    "sqrt": lambda x: torch.sqrt(x.abs()), "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.1), "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"), "relu": torch.relu,
    "cos": torch.cos, "sin": torch.sin, "reciprocal": lambda x: torch.reciprocal(x + 10),
    "clamp": lambda x: torch.clamp(x, -0.5, 0.7), "clamp_min": lambda x: torch.clamp(x, min=0.1),
    "clamp_max": lambda x: torch.clamp(x, max=0.1), "erf": torch.erf, "floor": torch.floor,
    "round": torch.round, "sign": torch.sign,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    check(UNARY[name], rand(4, 37) * 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_unary_half(dtype):
    check(lambda x: (torch.nn.functional.silu(x), torch.exp(x), torch.rsqrt(x.abs() + 1)), rand(3, 19, dtype=dtype))


def test_unary_int():
    x = torch.randint(-9, 9, (5, 6))
    check(lambda a: (-a, a.abs(), a.clamp(-3, 4), torch.relu(a), a.float().sigmoid()), x)


# ---- comparisons, logical, where, masked_fill -------------------------------------------------


def test_compare_and_logical():
    a, b = rand(3, 4), rand(4)
    check(lambda x, y: (x == y, x != 0.5, x < y, x <= 0, x > y, x >= 0.1, (x > 0) & (y < 0), (x > 0) | (y < 0),
                        ~(x > 0), torch.logical_not(x > 0), torch.logical_and(x > 0, y > 0),
                        torch.logical_or(x > 0, y > 0)), a, b)


def test_compare_int_and_half():
    a = torch.randint(0, 5, (6,))
    h = rand(6, dtype=torch.float16)
    check(lambda x, y: (x == 3, x > 2, y < 0.1, x.float() >= y.float()), a, h)


def test_where_masked_fill():
    x, y = rand(4, 5), rand(5)
    m = torch.rand(4, 5) > 0.5
    check(lambda a, b, c: (torch.where(c, a, b), torch.where(c, a, 0.0), a.masked_fill(c, float("-inf")),
                           a.masked_fill(~c, 2.0)), x, y, m)


# ---- reductions ------------------------------------------------------------------------------


def test_reductions():
    x = rand(3, 4, 5)
    check(lambda a: (a.sum(), a.sum(-1), a.sum((0, 2), keepdim=True), a.mean(1), a.mean((0, 2)), a.amax(-1),
                     a.amin(0, keepdim=True), a.argmax(-1), a.argmax(), a.max(1), a.min(-1), torch.cumsum(a, 1),
                     a.mean(), a.max(), a.min(), (a + 0.5).prod(1), (a[0] + 0.5).prod(-1, keepdim=True),
                     (a[0, 0] + 0.5).prod()), x)


def test_reductions_int_and_half():
    x = torch.randint(-5, 5, (4, 6))
    h = rand(4, 6, dtype=torch.bfloat16)
    check(lambda a, b: (a.sum(1), a.amax(0), torch.cumsum(a, 0), b.float().mean(-1), b.amax(-1), b.argmax(-1)), x, h)


def test_any_all_reductions():
    x = rand(3, 4, 5)
    check(lambda a: ((a > 0.5).any(-1), (a > 0.5).all(1, keepdim=True), (a > -2).all(), (a > 1.5).any(),
                     (a > 0).any(dim=(0, 2)), (a > -1).all(dim=(1,))), x)


# ---- softmax / norms -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_softmax(dtype):
    x = rand(2, 3, 17, dtype=dtype) * 4
    check(lambda a: (torch.softmax(a, -1), torch.softmax(a, 1), torch.log_softmax(a, -1),
                     torch.softmax(a.float(), 0)), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms(dtype):
    ln = torch.nn.LayerNorm(24).to(dtype)
    rms = torch.nn.RMSNorm(24, eps=1e-6).to(dtype)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
        rms.weight.normal_()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.rms = ln, rms

        def forward(self, x):
            return self.ln(x), self.rms(x), torch.nn.functional.rms_norm(x, (24,)), \
                torch.nn.functional.layer_norm(x, (3, 24))

    check(None, rand(2, 3, 24, dtype=dtype), module=M())


# ---- linear / matmul ---------------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 7, 40])
def test_linear_sizes(m):
    lin = torch.nn.Linear(70, 67)
    check(None, rand(m, 70), module=Fn(lin), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n", [(45, 70, 29), (128, 576, 200), (33, 1536, 13)])
def test_linear_prefill_shapes(m, k, n):
    """The weights-in-place GEMM: row blocks of 12, panels of 32 with tails, long K."""
    lin = torch.nn.Linear(k, n)
    check(None, rand(m, k), module=Fn(lin), rtol=1e-4, atol=1e-4)


def test_linear_no_bias_3d_and_matmuls():
    lin = torch.nn.Linear(33, 129, bias=False)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x, a, b, c):
            return self.lin(x), a @ b, torch.bmm(c, c.transpose(1, 2)), torch.addmm(b[0], a, b), a @ b[0]

    check(None, rand(2, 5, 33), rand(6, 9), rand(9, 9), rand(3, 4, 8), module=M(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_linear_half(dtype):
    lin = torch.nn.Linear(40, 24).to(dtype)
    check(None, rand(3, 40, dtype=dtype), module=Fn(lin), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("k,n", [(577, 3001), (100, 45), (8, 33)])
def test_linear_gemv_rows(k, n):
    # A GEMV over many threads' worth of rows, and K with each kind of remainder (whole 64-float
    # steps, 16-float steps, a masked tail, shorter than one vector).
    lin = torch.nn.Linear(k, n)
    check(None, rand(1, k), module=Fn(lin), rtol=1e-4, atol=1e-4)


# ---- attention ---------------------------------------------------------------------------------


@pytest.mark.parametrize("causal,gqa,mask", [(True, False, None), (False, True, "bool"), (False, False, "float"),
                                             (True, True, None)])
def test_sdpa(causal, gqa, mask):
    q = rand(2, 4, 5, 8)
    hkv = 2 if gqa else 4
    k, v = rand(2, hkv, 7 if not causal else 5, 8), rand(2, hkv, 7 if not causal else 5, 8)
    s = k.shape[2]
    if mask == "bool":
        m = torch.rand(5, s) > 0.3
        m[:, 0] = True
    elif mask == "float":
        m = torch.randn(2, 1, 5, s)
    else:
        m = None

    def fn(q, k, v, *rest):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=rest[0] if rest else None,
                                                                is_causal=causal, enable_gqa=gqa)

    args = (q, k, v) + ((m,) if m is not None else ())
    check(fn, *args, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("window,softcap,dtype", [(0, 0.0, torch.float32), (3, 0.0, torch.float32),
                                                  (0, 5.0, torch.float32), (0, 0.0, torch.bfloat16)])
def test_attend_cache(window, softcap, dtype):
    import ember.llm.ops  # noqa: F401  registers torch.ops.ember.attend_cache

    B, Hq, Hkv, S, D = 1, 6, 2, 16, 8

    class M(torch.nn.Module):
        def forward(self, q, kc, vc, pos):
            return torch.ops.ember.attend_cache(q, kc, vc, pos, 1 / math.sqrt(D), window, softcap)

    kc, vc = rand(B, Hkv, S, D, dtype=dtype), rand(B, Hkv, S, D, dtype=dtype)
    T = torch.export.Dim("T", min=1, max=8)
    dyn = ({2: T}, None, None, None)
    q0 = rand(B, Hq, 4, D, dtype=dtype)
    more = [(rand(B, Hq, t, D, dtype=dtype), kc, vc, torch.tensor([p])) for t, p in [(1, 0), (1, 15), (8, 8), (3, 5)]]
    check(None, q0, kc, vc, torch.tensor([2]), module=M(), dynamic_shapes=dyn, more=more, rtol=1e-4 if dtype == torch.float32 else 2e-2,
          atol=1e-5 if dtype == torch.float32 else 2e-2)


def test_attend_cache_out_of_range():
    import ember.llm.ops  # noqa: F401

    def fn(q, kc, vc, pos):
        return torch.ops.ember.attend_cache(q, kc, vc, pos, 0.5, 0, 0.0)

    kc = rand(1, 1, 4, 8)
    prog = to_ember(export(Fn(fn), (rand(1, 2, 2, 8), kc, kc, torch.tensor([0]))))
    with pytest.raises(Exception, match="do not fit the cache"):
        prog.run("forward", rand(1, 2, 2, 8), kc, kc, torch.tensor([3]))


# ---- shape / indexing ----------------------------------------------------------------------------


def test_shape_ops():
    x = rand(2, 3, 4)
    check(lambda a: (a.view(6, 4) + 1, a.reshape(-1), a.unsqueeze(1) * 2, a[:, :1].squeeze(1), a.flatten(1),
                     a.permute(2, 0, 1) + 0, a.transpose(-1, -2) + 0, a.expand(3, 2, 3, 4) + 0,
                     a[:, 1:, ::2] + 0, a.select(1, -1) + 0, torch.cat([a, a * 2], 1), torch.stack([a, a], 0),
                     a.repeat(2, 1, 1), (a * 2).clone() + 1, a.unflatten(2, (2, 2)) + 0), x)


def test_indexing():
    x = rand(5, 6, 3)
    idx = torch.tensor([4, 0, 2, 2])
    emb = torch.nn.Embedding(11, 7)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = emb

        def forward(self, a, i, tok):
            return (a[i], a[:, i], a[i, i], a[:, i, 1], torch.index_select(a, 1, i), torch.gather(a, 1, i.view(1, 4, 1).expand(5, 4, 3)),
                    self.emb(tok), a[-1], a[..., i[1:3]])

    check(None, x, idx, torch.tensor([[1, 10, 3]]), module=M())


def test_scatter_ops():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(1, 2, 8, 4))

        def forward(self, val, pos):
            self.cache.index_copy_(2, pos, val)
            return self.cache + 0

    val = rand(1, 2, 3, 4)
    m = M()
    prog = to_ember(export(m, (val, torch.tensor([1, 2, 3]))))
    out = prog.run("forward", val, torch.tensor([1, 2, 3]))
    assert_close(out[0], m(val, torch.tensor([1, 2, 3])))

    x, src = rand(4, 6), rand(4, 2)
    check(lambda a, s, i: (torch.slice_scatter(a, s, 1, 2, 4), torch.index_put(a, (i,), s[:2].sum(1, keepdim=True)),
                           torch.index_put(a, (i,), torch.ones(1), accumulate=True), torch.select_scatter(a, s[:, 0], 1, 3)),
          x, src, torch.tensor([1, 3]))


# ---- factories / conversions ---------------------------------------------------------------------


def test_factories_and_conversions():
    x = rand(3, 5)
    check(lambda a: (torch.arange(a.shape[1]) + (a[0] > 9).long(), torch.arange(2, 9, 3) + (a[0, :3] > 9).long(), torch.arange(0.0, 1.0, 0.25) + a[0, :4],
                     torch.full((2, 3), 7.5) + a[:2, :3], torch.zeros_like(a) + 1, torch.ones(2, 2, dtype=torch.int64) * 3 + (a[:2, :2] > 9).long(),
                     torch.triu(a, 1), torch.tril(a), a.to(torch.float16), a.to(torch.bfloat16), (a * 10).to(torch.int32),
                     (a > 0).to(torch.float32), torch.full_like(a, 2, dtype=torch.int64), a.half().float()), x)


# ---- dynamic shapes --------------------------------------------------------------------------------


def test_dynamic_dims():
    lin = torch.nn.Linear(16, 12)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            n = x.shape[1]
            y = torch.softmax(self.lin(x), -1)
            mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
            s = (x @ x.transpose(1, 2)).masked_fill(mask, -1e9)
            return y + torch.arange(n).view(1, n, 1), torch.softmax(s, -1)

    T = torch.export.Dim("T", min=1, max=20)
    more = [(rand(2, t, 16),) for t in (1, 2, 13, 20)]
    check(None, rand(2, 5, 16), module=M(), dynamic_shapes=({1: T},), more=more, rtol=1e-4, atol=1e-5)


def test_threads_give_same_results():
    lin = torch.nn.Linear(64, 4096)
    x = rand(1, 64)
    prog = to_ember(export(Fn(lin), (x,)))
    before = ember.runtime.get_num_threads()
    try:
        ember.runtime.set_num_threads(1)
        one = prog.run("forward", x)[0]
        ember.runtime.set_num_threads(2)
        two = prog.run("forward", x)[0]
    finally:
        ember.runtime.set_num_threads(before)
    assert (one == two).all()
    assert_close(one, lin(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("D,window,softcap", [(64, 0, 0.0), (40, 0, 0.0), (64, 50, 0.0), (64, 0, 20.0)])
def test_attend_cache_decode_long_context(D, window, softcap):
    """T == 1 over long caches: the split-K decode path (chunks merged exactly), GQA 9/3, row tails."""
    import ember.llm.ops  # noqa: F401

    B, Hq, Hkv, S = 1, 9, 3, 300

    class M(torch.nn.Module):
        def forward(self, q, kc, vc, pos):
            return torch.ops.ember.attend_cache(q, kc, vc, pos, 1 / math.sqrt(D), window, softcap)

    kc, vc = rand(B, Hkv, S, D), rand(B, Hkv, S, D)
    more = [(rand(B, Hq, 1, D), kc, vc, torch.tensor([p])) for p in (0, 17, 100, 299)]
    check(None, rand(B, Hq, 1, D), kc, vc, torch.tensor([5]), module=M(), more=more, rtol=1e-4, atol=1e-5)


def test_silu_large_fp32_fast_path():
    """Large fp32 silu: vectorized, split across threads, with a tail that is not a multiple of 16."""
    check(torch.nn.functional.silu, rand(3, 20001) * 8, rtol=1e-5, atol=1e-6)
