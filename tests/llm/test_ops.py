"""ember::attend_cache reference semantics against a naive masked attention."""

from __future__ import annotations

import math

import pytest
import torch

import ember.llm.ops  # noqa: F401  (registers the op)


def naive(q, k, v, start, scale, window, softcap):
    # q [B, Hq, T, D], k/v [B, Hkv, S, D] -> [B, T, Hq, D]; the whole cache, explicit mask.
    b, hq, t, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=1).double()
    v = v.repeat_interleave(hq // hkv, dim=1).double()
    scores = q.double() @ k.transpose(-1, -2) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    mask = torch.zeros(t, s, dtype=torch.bool)
    for i in range(t):
        p = start + i
        for j in range(s):
            mask[i, j] = j <= p and (window <= 0 or j > p - window)
    scores = scores.masked_fill(~mask, -math.inf)
    return (scores.softmax(-1) @ v).transpose(1, 2)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("start,t", [(0, 1), (0, 7), (5, 1), (9, 6)])
@pytest.mark.parametrize("window,softcap", [(0, 0.0), (4, 0.0), (0, 2.0), (3, 1.5)])
def test_matches_naive(hq, hkv, start, t, window, softcap) -> None:
    g = torch.Generator().manual_seed(hq * 100 + start * 10 + t)
    s, d = 20, 8
    q = torch.randn(1, hq, t, d, generator=g)
    k = torch.randn(1, hkv, s, d, generator=g)
    v = torch.randn(1, hkv, s, d, generator=g)
    # Garbage past the written positions must not matter.
    k[:, :, start + t :] = 1e4
    v[:, :, start + t :] = float("nan")
    k0, v0, q0 = k.clone(), v.clone(), q.clone()
    out = torch.ops.ember.attend_cache(q, k, v, torch.tensor([start]), 0.3, window, softcap)
    assert out.shape == (1, t, hq, d)
    expected = naive(q, k.nan_to_num(0.0), v.nan_to_num(0.0), start, 0.3, window, softcap)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    # Functional: inputs untouched.
    assert torch.equal(q, q0) and torch.equal(k, k0) and torch.equal(v.nan_to_num(0), v0.nan_to_num(0))


def test_bf16_output_dtype() -> None:
    q = torch.randn(1, 2, 3, 8).bfloat16()
    k = torch.randn(1, 1, 8, 8).bfloat16()
    out = torch.ops.ember.attend_cache(q, k, k, torch.tensor([2]), 0.5, 0, 0.0)
    assert out.dtype == torch.bfloat16 and out.shape == (1, 3, 2, 8)


def test_out_of_range_position_fails_clearly() -> None:
    q = torch.randn(1, 2, 4, 8)
    k = torch.randn(1, 2, 8, 8)
    with pytest.raises(ValueError, match="do not fit the cache of 8"):
        torch.ops.ember.attend_cache(q, k, k, torch.tensor([6]), 1.0, 0, 0.0)


def test_fake_impl_under_export() -> None:
    class M(torch.nn.Module):
        def forward(self, q, k, v, pos):
            return torch.ops.ember.attend_cache(q, k, v, pos, 0.25, 0, 0.0)

    args = (torch.randn(1, 4, 3, 8), torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8), torch.tensor([0]))
    ep = torch.export.export(M(), args, dynamic_shapes=({2: torch.export.Dim("t", max=16)}, None, None, None), strict=False)
    node = [n for n in ep.graph.nodes if n.op == "call_function"][0]
    assert str(node.target) == "ember.attend_cache.default"
    out = node.meta["val"]  # the fake impl's output: [B, T, Hq, D] with T the symbolic query length
    q_len = [n for n in ep.graph.nodes if n.op == "placeholder"][0].meta["val"].shape[2]
    assert isinstance(q_len, torch.SymInt)
    assert out.shape[0] == 1 and out.shape[2:] == (4, 8)
    assert str(out.shape[1]) == str(q_len)  # the same symbol as q's dim 2, not a number
