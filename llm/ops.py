"""ember custom ops used by exported LLMs (namespace ``ember``).

Importing this module registers the ops with ``torch.library``; it is imported
lazily by the export path only (``ember.llm`` itself never imports torch).
"""

from __future__ import annotations

import torch

__all__ = ["attend_cache", "quantize_kv", "attend_cache_int8"]


@torch.library.custom_op("ember::attend_cache", mutates_args=())
def attend_cache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    input_pos: torch.Tensor,
    scale: float,
    sliding_window: int,
    softcap: float,
) -> torch.Tensor:
    """Causal attention of T new queries over a static KV cache.

    ``ember::attend_cache(Tensor q, Tensor k_cache, Tensor v_cache, Tensor input_pos,
    float scale, int sliding_window, float softcap) -> Tensor``

    Shapes and dtypes:
      - q:        [B, Hq, T, D], float (fp32/bf16/fp16)
      - k_cache:  [B, Hkv, S, D], same dtype as q; S = max_context_len. It already
                  holds this step's keys at positions input_pos .. input_pos+T-1.
      - v_cache:  [B, Hkv, S, D], same dtype as q, likewise.
      - input_pos: int64 [1], absolute position of the first query.
      - returns:  [B, T, Hq, D] in q's dtype (the layout HF attention functions
                  return, so the caller reshapes it to [B, T, Hq*D] without a copy).

    Semantics (the C++ kernel implements exactly this):
      - Query i (0 <= i < T) sits at absolute position p = input_pos + i.
      - GQA: Hq % Hkv == 0; query head h reads kv head h // (Hq // Hkv).
      - Key j (0 <= j < S) is visible to query i iff j <= p, and, when
        sliding_window > 0, also j > p - sliding_window (so a query sees at most
        sliding_window keys, itself included). sliding_window <= 0 means no window.
      - scores[j] = (q_i . k_j) * scale, computed in fp32.
      - softcap > 0: scores = softcap * tanh(scores / softcap) (before masking and
        softmax); softcap <= 0 means no capping.
      - Masked keys get probability exactly 0; softmax over visible keys in fp32;
        out_i = sum_j p_j * v_j, accumulated in fp32, cast to q's dtype.
      - Keys at positions >= input_pos + T are never read, so the cost of a step
        grows with the position, not with S.
      - Requires input_pos + T <= S. The op is functional: no input is modified.
    """
    batch, n_q_heads, n_queries, head_dim = q.shape
    n_kv_heads = k_cache.shape[1]
    group = n_q_heads // n_kv_heads
    start = int(input_pos.reshape(-1)[0].item())
    end = start + n_queries  # keys past `end` are never visible
    if n_q_heads % n_kv_heads != 0:
        raise ValueError(f"attend_cache: Hq={n_q_heads} is not a multiple of Hkv={n_kv_heads}")
    if start < 0 or end > k_cache.shape[2]:
        raise ValueError(
            f"attend_cache: positions [{start}, {end}) do not fit the cache of {k_cache.shape[2]} slots; "
            "export with a larger max_context_len or stop generating at the context end"
        )

    # [B, Hkv, G, T, D]: query heads grouped under the kv head they read.
    qg = q.float().reshape(batch, n_kv_heads, group, n_queries, head_dim)
    keys = k_cache[:, :, :end].float()  # [B, Hkv, end, D]
    values = v_cache[:, :, :end].float()  # [B, Hkv, end, D]

    scores = torch.einsum("bhgtd,bhsd->bhgts", qg, keys) * scale  # [B, Hkv, G, T, end]
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)

    query_pos = torch.arange(start, end, device=q.device)[:, None]  # [T, 1]
    key_pos = torch.arange(end, device=q.device)[None, :]  # [1, end]
    visible = key_pos <= query_pos  # [T, end]
    if sliding_window > 0:
        visible = visible & (key_pos > query_pos - sliding_window)
    scores = scores.masked_fill(~visible, float("-inf"))

    probs = torch.softmax(scores, dim=-1)  # [B, Hkv, G, T, end]
    out = torch.einsum("bhgts,bhsd->bhgtd", probs, values)  # [B, Hkv, G, T, D]
    out = out.reshape(batch, n_q_heads, n_queries, head_dim).transpose(1, 2)  # [B, T, Hq, D]
    return out.contiguous().to(q.dtype)


@attend_cache.register_fake
def _attend_cache_fake(q, k_cache, v_cache, input_pos, scale, sliding_window, softcap):
    batch, n_q_heads, n_queries, head_dim = q.shape
    return q.new_empty((batch, n_queries, n_q_heads, head_dim))


@torch.library.custom_op("ember::quantize_kv", mutates_args=())
def quantize_kv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys or values of a step in int8 with one scale per token and head (the int8 KV cache).

    ``ember::quantize_kv(Tensor x) -> (Tensor codes, Tensor scales)``

    Shapes and dtypes:
      - x:       [B, H, T, D], float (fp32/bf16/fp16)
      - codes:   int8 [B, H, T, D]
      - scales:  float32 [B, H, T, 1]

    Semantics (the C++ kernel implements exactly this, bit for bit):
      - s = max_d |x[..., d]| / 127 in fp32 (symmetric, one scale per row of D values);
      - codes = clamp(round_half_even(x / s), -127, 127); a row of zeros gets s = 0, codes 0;
      - a row holding a NaN or an infinity gets s = NaN and codes 0, so attention over it gives
        NaN (as the fp32 cache would) instead of a silently wrong number.
      Dequantized, a row is codes * s (what ``attend_cache_int8`` reads).
    """
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)  # [B, H, T, 1]
    finite = torch.isfinite(amax)
    scales = amax / 127.0
    safe = torch.where((scales > 0) & finite, scales, torch.ones_like(scales))
    codes = torch.round(xf / safe).clamp(-127, 127)
    codes = torch.where((scales > 0) & finite, codes, torch.zeros_like(codes)).to(torch.int8)
    scales = torch.where(finite, scales, torch.full_like(scales, float("nan")))
    return codes, scales


@quantize_kv.register_fake
def _quantize_kv_fake(x):
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


@torch.library.custom_op("ember::attend_cache_int8", mutates_args=())
def attend_cache_int8(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    k_scales: torch.Tensor,
    v_cache: torch.Tensor,
    v_scales: torch.Tensor,
    input_pos: torch.Tensor,
    scale: float,
    sliding_window: int,
    softcap: float,
) -> torch.Tensor:
    """``attend_cache`` over an int8 cache: keys and values are ``codes * scales`` (``quantize_kv``).

    ``ember::attend_cache_int8(Tensor q, Tensor k_cache, Tensor k_scales, Tensor v_cache,
    Tensor v_scales, Tensor input_pos, float scale, int sliding_window, float softcap) -> Tensor``

      - k_cache, v_cache: int8 [B, Hkv, S, D]; k_scales, v_scales: float32 [B, Hkv, S, 1].
      - The queries are quantized as the cache's rows are: each query row of D values becomes
        ``quantize_kv``'s codes * scale (llama.cpp's q8_0 cache does the same), so that decode
        scores are integer dot products of codes times the two rows' scales.
      - Everything else, the result included, as ``attend_cache`` over those queries: the cache
        rows are dequantized in fp32 (code * scale) and attended exactly as an fp32 cache
        holding those values.
    """
    q_codes, q_scales = quantize_kv(q)
    queries = q_codes.float() * q_scales  # [B, Hq, T, D] fp32
    keys = k_cache.float() * k_scales  # [B, Hkv, S, D]
    values = v_cache.float() * v_scales  # [B, Hkv, S, D]
    out = attend_cache(queries, keys, values, input_pos, scale, sliding_window, softcap)
    return out.to(q.dtype)


@attend_cache_int8.register_fake
def _attend_cache_int8_fake(q, k_cache, k_scales, v_cache, v_scales, input_pos, scale, sliding_window, softcap):
    batch, n_q_heads, n_queries, head_dim = q.shape
    return q.new_empty((batch, n_queries, n_q_heads, head_dim))
