"""Canonical quantized ops (namespace ``ember``) and the weight format they read.

Every quantized file reaches the runtime through these two ops, whatever produced it: torchao's
exported patterns (fused by ``export/passes/fuse_quantized_*.py``) or a GGUF file's own blocks
(``ember.quant.gguf``). The scheme is carried by typed arguments, not by one op per combination.

Weight format (one row per output feature / vocabulary entry, K inputs per row):
  - ``qdata``: the integer codes q of a [N, K] weight.
      bits == 8: int8 [N, K], q in [-128, 127].
      bits == 4: uint8 [N, K / 2], two codes per byte: byte j of a row holds q[2j] + 8 in its low
                 nibble and q[2j + 1] + 8 in its high nibble (q in [-8, 7]).
  - ``scale``: float (fp32, fp16 or bf16) [N, K / group_size].
  - ``zero_point``: None, or int8 / float [N, K / group_size], or [1, 1] (one value for every
    group, as GGUF's Q4_1 needs).
  - ``offset``: None, or float [N, K / group_size] or [1, 1].
  - the weight is ``w[n, k] = (q[n, k] - zero_point[n, g]) * scale[n, g] + offset[n, g]`` with
    g = k // group_size, every step in fp32 (a missing zero point or offset is skipped). With
    an integer zero point and no offset this is exactly torchao's ``dequantize_affine``; GGUF's
    ``d * q + m`` blocks are q - (-8) scaled plus an offset, exactly as ggml computes them.

Importing this module registers the ops with ``torch.library`` (no other side effects).
"""

from __future__ import annotations

from enum import IntEnum

import torch

__all__ = ["ActQuant", "quantized_linear", "quantized_embedding", "dequantize_weight", "pack_int4",
           "unpack_int4", "quantize_activation_per_token", "quantize_activation_per_group", "weight_bytes", "bits_of_range", "canonical_from_codes"]

SUPPORTED_BITS = (4, 8)


class ActQuant(IntEnum):
    """How ``quantized_linear`` treats its input (the ``act_quant`` argument)."""

    NONE = 0  # weight-only: the float input multiplies the dequantized weight
    INT8_ASYM_PER_TOKEN = 1  # torchao's dynamic int8 per-token asymmetric quant-dequant first
    # int8 symmetric per group of the weight's group size along K (llama.cpp's Q8_0 activations):
    # what a weight-only file runs with when exported with --qactivations int8
    INT8_SYM_PER_GROUP = 2


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int8 codes in [-8, 7], [N, K] with K even -> uint8 [N, K / 2] (see the module docstring)."""
    if q.shape[-1] % 2:
        raise ValueError(f"pack_int4: the last dim ({q.shape[-1]}) must be even")
    if q.numel():
        lo, hi = (int(v) for v in torch.aminmax(q))
        if lo < -8 or hi > 7:
            raise ValueError(f"pack_int4: codes must lie in [-8, 7], got [{lo}, {hi}]")
    u = (q.to(torch.int8) + 8).view(torch.uint8)  # in [0, 15]: no overflow
    return (u[..., 0::2] | (u[..., 1::2] << 4)).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K / 2] -> int8 codes [N, K] in [-8, 7]."""
    lo = (packed & 0x0F).to(torch.int8) - 8
    hi = (packed >> 4).to(torch.int8) - 8
    return torch.stack([lo, hi], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def bits_of_range(qmin: int, qmax: int) -> int | None:
    """The storage bits for integer codes in [qmin, qmax]: 4 inside [-8, 7], 8 inside [-128, 127],
    None for anything wider."""
    if not (-128 <= qmin < qmax <= 127):
        return None
    return 4 if qmin >= -8 and qmax <= 7 else 8


def canonical_from_codes(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, bits: int,
                         group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Unpacked int8 codes q [N, K] with per-group ``scale`` / ``zero_point`` (any shape holding
    N * K / group_size values, e.g. torchao's) -> (qdata, scale [N, G], zero_point [N, G] or None)
    in this module's format: 4-bit codes packed two per byte, an all-zero zero point dropped (it
    changes no value). The values are the caller's; nothing is rounded here."""
    if q.dtype != torch.int8 or q.dim() != 2:
        raise ValueError(f"codes must be a 2-D int8 tensor, got {q.dtype} {list(q.shape)}")
    n, k = q.shape
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size {group_size} does not divide the row length {k}")
    groups = k // group_size
    if scale.numel() != n * groups:
        raise ValueError(f"scale must hold {n} x {groups} values, got {list(scale.shape)}")
    z = None
    if zero_point is not None:
        if zero_point.numel() != n * groups:
            raise ValueError(f"zero_point must hold {n} x {groups} values, got {list(zero_point.shape)}")
        z = zero_point.reshape(n, groups).contiguous() if bool(torch.any(zero_point != 0)) else None
    qdata = pack_int4(q) if bits == 4 else q.contiguous()
    return qdata, scale.reshape(n, groups).contiguous(), z


def _codes(qdata: torch.Tensor, bits: int) -> torch.Tensor:
    if bits == 4:
        if qdata.dtype != torch.uint8:
            raise ValueError(f"4-bit qdata must be uint8 (two codes per byte), got {qdata.dtype}")
        return unpack_int4(qdata)
    if bits == 8:
        if qdata.dtype != torch.int8:
            raise ValueError(f"8-bit qdata must be int8, got {qdata.dtype}")
        return qdata
    raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")


def _per_group(t: torch.Tensor, n: int, groups: int, group_size: int, what: str) -> torch.Tensor:
    """A [N, G] or [1, 1] parameter -> fp32 [N, K] (each group's value repeated group_size times)."""
    if t.dim() != 2 or tuple(t.shape) not in ((n, groups), (1, 1)):
        raise ValueError(f"{what} must be [{n}, {groups}] or [1, 1], got {list(t.shape)}")
    return t.float().expand(n, groups).repeat_interleave(group_size, dim=1)


def dequantize_weight(qdata: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None,
                      offset: torch.Tensor | None, bits: int, group_size: int) -> torch.Tensor:
    """The fp32 [N, K] weight the codes stand for (the reference every kernel is tested against)."""
    q = _codes(qdata, bits)
    n, k = q.shape
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size {group_size} does not divide the row length {k}")
    groups = k // group_size
    w = q.float()
    if zero_point is not None:
        w = w - _per_group(zero_point, n, groups, group_size, "zero_point")
    w = w * _per_group(scale, n, groups, group_size, "scale")
    if offset is not None:
        w = w + _per_group(offset, n, groups, group_size, "offset")
    return w


def weight_bytes(qdata: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None,
                 offset: torch.Tensor | None) -> int:
    """Bytes one quantized weight occupies in a file (codes and every per-group parameter)."""
    parts = [qdata, scale] + [t for t in (zero_point, offset) if t is not None]
    return sum(t.numel() * t.element_size() for t in parts)


def quantize_activation_per_token(x: torch.Tensor) -> torch.Tensor:
    """torchao's dynamic int8 asymmetric per-token quantize-dequantize of ``x`` [..., K].

    Per row r: lo = min(min(x_r), 0), hi = max(max(x_r), 0); scale = (hi - lo) / 255 clamped
    to at least the smallest normal of x's dtype; zp = clamp(-128 - round(lo / scale), -128, 127);
    q = clamp(round(x * (1 / scale)) + zp, -128, 127); result (q - zp) * scale. round() is half
    to even. The same math as torchao's choose_qparams_affine / quantize_affine /
    dequantize_affine with MappingType.ASYMMETRIC, int8 and a per-token block.
    """
    lo = torch.clamp(x.amin(dim=-1, keepdim=True), max=0)
    hi = torch.clamp(x.amax(dim=-1, keepdim=True), min=0)
    scale = torch.clamp((hi - lo) / 255.0, min=torch.finfo(x.dtype).smallest_normal)
    zp = torch.clamp(-128 - torch.round(lo / scale), -128, 127)
    q = torch.clamp(torch.round(x * (1.0 / scale)) + zp, -128, 127)
    return ((q - zp) * scale).to(x.dtype)


def quantize_activation_per_group(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dynamic int8 symmetric quantize-dequantize of ``x`` [..., K] per group of ``group_size``
    consecutive values (K % group_size == 0), as llama.cpp quantizes activations to Q8_0.

    Per group, in fp32: d = max|x| / 127; q = clamp(round(x / d), -127, 127) (round half to even;
    q = 0 when d == 0); result q * d, cast to x's dtype. A NaN or infinity in a group makes the
    group's result NaN (so every output of the row is NaN).
    """
    k = x.shape[-1]
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size {group_size} does not divide the row length {k}")
    xs = x.float().reshape(*x.shape[:-1], k // group_size, group_size)
    d = xs.abs().amax(dim=-1, keepdim=True) / 127.0
    nonzero = d > 0
    q = torch.where(nonzero, torch.round(xs / torch.where(nonzero, d, 1.0)), 0.0).clamp(-127, 127)
    q = torch.where(torch.isfinite(d), q, float("nan"))  # a NaN / inf in the group: NaN out
    return (q * d).reshape(x.shape).to(x.dtype)


@torch.library.custom_op("ember::quantized_linear", mutates_args=())
def quantized_linear(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None,
                     offset: torch.Tensor | None, bias: torch.Tensor | None, bits: int, group_size: int,
                     act_quant: int) -> torch.Tensor:
    """``linear(act(x), dequantize_weight(...), bias)``.

    x: [..., K] float; the weight [N, K] in the format of the module docstring; bias: None or
    [N]; act_quant: an ``ActQuant`` value. Returns [..., N] in x's dtype. The math is in fp32
    (a kernel may sum integer products exactly when activations are quantized; the result
    differs from this reference by float rounding only).
    """
    if act_quant == ActQuant.INT8_ASYM_PER_TOKEN:
        x = quantize_activation_per_token(x)
    elif act_quant == ActQuant.INT8_SYM_PER_GROUP:
        x = quantize_activation_per_group(x, group_size)
    elif act_quant != ActQuant.NONE:
        raise ValueError(f"act_quant must be one of {[int(a) for a in ActQuant]}, got {act_quant}")
    w = dequantize_weight(qdata, scale, zero_point, offset, bits, group_size)
    out = torch.nn.functional.linear(x.float(), w, None if bias is None else bias.float())
    return out.to(x.dtype)


@quantized_linear.register_fake
def _(x, qdata, scale, zero_point, offset, bias, bits, group_size, act_quant):
    return x.new_empty((*x.shape[:-1], qdata.shape[0]))


@torch.library.custom_op("ember::quantized_embedding", mutates_args=())
def quantized_embedding(qdata: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None,
                        offset: torch.Tensor | None, indices: torch.Tensor, bits: int, group_size: int,
                        dtype: torch.dtype) -> torch.Tensor:
    """Rows ``indices`` of the dequantized [N, D] table: [*indices.shape, D] in ``dtype``.

    indices: int32/int64, each in [0, N). The table is in the format of the module docstring
    (one row per vocabulary entry), so a tied lm_head's ``quantized_linear`` can read the very
    same tensors.
    """
    w = dequantize_weight(qdata, scale, zero_point, offset, bits, group_size)
    return torch.nn.functional.embedding(indices, w).to(dtype)


@quantized_embedding.register_fake
def _(qdata, scale, zero_point, offset, indices, bits, group_size, dtype):
    d = qdata.shape[1] * (2 if bits == 4 else 1)
    return scale.new_empty((*indices.shape, d), dtype=dtype)
