"""The CPU delegate's packed weight ("ECW1" blob): written once at export, mapped at run time.

A canonical quantized weight (export/quant_ops.py: codes, per-group scale, zero point, offset) is
rearranged so that the micro-kernels read it as one sequential stream with one weight row per
32-bit lane: rows are taken in blocks of 16 (a 512-bit register holds one int32 per row; AVX2
reads a block as two halves of 8). Nothing is requantized: the codes, scales, zero points and
offsets are the canonical ones, bit for bit, so the delegate computes the same weight.

Codes are stored unsigned, u = q + shift (shift 8 for 4 bits, 128 for 8 bits), so that the
integer dot products are unsigned-weight x signed-activation (VPDPBUSD / VPMADDUBSW operand
order); the kernels fold the shift into the zero point.

Layout (little-endian):
  header, 64 bytes: magic b"ECW1", u32 version, bits, scale_type, zp_kind, zp_type, offset_kind,
      offset_type, flags (bit 0: bias, bit 1: row sums, bit 2: interleaved), group_size; i64 N, K;
      f32 zp_const, offset_const.
  NB = ceil(N / 16) blocks, each padded to a multiple of 64 bytes. With flag bit 2 (what `pack`
  writes), group by group, unpadded:
    codes:   (gs / W) chunks x 16 rows x 4 bytes (W codes per row per chunk):
               4 bits (W = 8): byte i of a row's word holds u[k + i] (low nibble) and
               u[k + 4 + i] (high nibble), k = the chunk's first column;
               8 bits (W = 4): byte i holds u[k + i].
    scales:  [16] in scale_type
    zp:      [16] in zp_type      (only when zp_kind is PER_GROUP)
    offsets: [16] in offset_type  (only when offset_kind is PER_GROUP)
  then
    rowsum:  [16] fp32, sum_k w[n, k] of the dequantized row (only with flag bit 1: the
             int8-activation kernels need it for the activation's zero point)
  so a block is read front to back as one stream (a group's coefficients right after its codes,
  where the kernel needs them). Without flag bit 2 (blobs written before 2026-11-26, still read),
  all G groups' codes come first, then scales [G][16], zp [G][16] and offsets [G][16], each part
  padded to 64 bytes, then rowsum.
  bias: [N] fp32 (only with flag bit 0), padded to 64 bytes.
Rows past N in the last block are zero. A [1, 1] zero point or offset is a constant in the header
(zp_kind / offset_kind CONST); a missing one is NONE.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import torch


MAGIC = b"ECW1"
VERSION = 1
ROWS = 16  # weight rows per block
ALIGN = 64
MAX_GROUP = 65536  # codes summed in one int32 per group: 65536 * 255 * 128 < 2^31
HEADER = struct.Struct("<4s9Iqqff")
assert HEADER.size == 64


class ParamKind(IntEnum):
    NONE = 0
    CONST = 1
    PER_GROUP = 2


class ParamType(IntEnum):
    F32 = 0
    F16 = 1
    BF16 = 2
    I8 = 3


_TYPES = {torch.float32: ParamType.F32, torch.float16: ParamType.F16, torch.bfloat16: ParamType.BF16,
          torch.int8: ParamType.I8}
_SIZES = {ParamType.F32: 4, ParamType.F16: 2, ParamType.BF16: 2, ParamType.I8: 1}
_TORCH = {v: k for k, v in _TYPES.items()}


def _pad(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def codes_per_word(bits: int) -> int:
    return 8 if bits == 4 else 4


def unsupported_reason(n: int, k: int, group_size: int, bits: int, params: dict[str, torch.Tensor | None]) -> str | None:
    """Why this weight cannot be packed (None when it can): the kernels read whole 32-bit words."""
    if bits not in (4, 8):
        return f"bits must be 4 or 8, got {bits}"
    if k <= 0 or n <= 0:
        return f"empty weight [{n}, {k}]"
    if group_size <= 0 or k % group_size:
        return f"group size {group_size} does not divide the row length {k}"
    if group_size % codes_per_word(bits):
        return f"group size {group_size} is not a multiple of {codes_per_word(bits)}"
    if group_size > MAX_GROUP:
        return f"group size {group_size} is above {MAX_GROUP} (the int32 sums of one group could overflow)"
    for name, t in params.items():
        if t is None:
            continue
        if t.dtype not in _TYPES or (name == "scale" and t.dtype == torch.int8) or (name == "offset" and t.dtype == torch.int8):
            return f"{name} dtype {t.dtype} is not supported"
    return None


@dataclass(frozen=True)
class PackedWeight:
    """A parsed blob (for tests and inspection): the canonical tensors it holds."""

    qdata: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor | None
    offset: torch.Tensor | None
    bias: torch.Tensor | None
    bits: int
    group_size: int


def _param_groups(t: torch.Tensor, nb: int) -> np.ndarray:
    """[N, G] -> uint8 [NB, G, 16 * size]: each block's 16 rows of every group (rows past N are 0)."""
    n, g = t.shape
    a = t.contiguous().view(torch.uint8 if t.element_size() == 1 else torch.int16 if t.element_size() == 2 else torch.int32)
    a = a.numpy().reshape(n, g)
    full = np.zeros((nb * ROWS, g), dtype=a.dtype)
    full[:n] = a
    return np.ascontiguousarray(full.reshape(nb, ROWS, g).transpose(0, 2, 1)).view(np.uint8).reshape(nb, g, -1)


def _split_param(t: torch.Tensor | None, n: int, g: int, what: str) -> tuple[ParamKind, ParamType, float, torch.Tensor | None]:
    if t is None:
        return ParamKind.NONE, ParamType.F32, 0.0, None
    if tuple(t.shape) == (1, 1):
        return ParamKind.CONST, ParamType.F32, float(t.float().item()), None
    if tuple(t.shape) != (n, g):
        raise ValueError(f"{what} must be [{n}, {g}] or [1, 1], got {list(t.shape)}")
    return ParamKind.PER_GROUP, _TYPES[t.dtype], 0.0, t


FLAG_BIAS = 1
FLAG_ROWSUM = 2
FLAG_INTERLEAVED = 4


def pack(qdata: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, offset: torch.Tensor | None,
         bias: torch.Tensor | None, bits: int, group_size: int, rowsum: bool = True, interleave: bool = True) -> bytes:
    """The blob of one canonical weight (see the module docstring). `rowsum`: include the row
    sums an int8-activation linear needs (0.25 bits per row of K weights; off for tables only
    gathered and for fp32-activation linears). `interleave=False` writes the earlier layout (all
    codes first), which the runtime still reads; the tests use it."""
    raw = qdata.contiguous().numpy()
    n, k = raw.shape[0], raw.shape[1] * (2 if bits == 4 else 1)
    reason = unsupported_reason(n, k, group_size, bits, {"scale": scale, "zero_point": zero_point, "offset": offset})
    if reason is not None:
        raise ValueError(f"cannot pack a [{n}, {k}] weight for the CPU delegate: {reason}")
    g = k // group_size
    nb = -(-n // ROWS)
    if tuple(scale.shape) != (n, g):
        raise ValueError(f"scale must be [{n}, {g}], got {list(scale.shape)}")
    zp_kind, zp_type, zp_const, zp = _split_param(zero_point, n, g, "zero_point")
    off_kind, off_type, off_const, off = _split_param(offset, n, g, "offset")

    w = codes_per_word(bits)
    u = np.zeros((nb * ROWS, k), dtype=np.uint8)  # unsigned codes, rows past N zero
    if bits == 4:  # byte j of a row: code 2j in the low nibble, 2j + 1 in the high one (both + 8)
        u[:n, 0::2] = raw & 15
        u[:n, 1::2] = raw >> 4
    else:
        u[:n] = raw.view(np.uint8) ^ 0x80  # q + 128
    chunks = u.reshape(nb, ROWS, g, group_size // w, w)
    if bits == 4:
        chunks = chunks[..., 0:4] | (chunks[..., 4:8] << 4)
    code_bytes = np.ascontiguousarray(chunks.transpose(0, 2, 3, 1, 4)).reshape(nb, g, -1)  # [NB][G][C][16][4]

    # Row sums of the dequantized weight, sum_k ((q - z) * s + m) per group, in float64: with Q the
    # group's code sum, s * (Q - gs * z) + gs * m.
    q_sum = u[:n].reshape(n, g, group_size).sum(axis=2, dtype=np.int64) - group_size * (8 if bits == 4 else 128)
    s64 = scale.double().numpy()
    z64 = zero_point.double().numpy() if zero_point is not None else 0.0
    m64 = offset.double().numpy() if offset is not None else 0.0
    sums = np.zeros((nb * ROWS,), dtype=np.float32)
    sums[:n] = (s64 * (q_sum - group_size * z64) + group_size * m64).sum(axis=1)

    groups = [code_bytes, _param_groups(scale, nb)]  # each [NB][G][bytes]
    if zp is not None:
        groups.append(_param_groups(zp, nb))
    if off is not None:
        groups.append(_param_groups(off, nb))
    if interleave:  # one group after another
        parts = [np.concatenate(groups, axis=2).reshape(nb, -1)]
    else:  # every group's codes, then each parameter's [G][16], padded
        parts = [np.pad(x.reshape(nb, -1), ((0, 0), (0, _pad(x[0].size) - x[0].size))) for x in groups]
    if rowsum:
        parts.append(sums.reshape(nb, ROWS).view(np.uint8))
    used = sum(p.shape[1] for p in parts)
    parts.append(np.zeros((nb, _pad(used) - used), dtype=np.uint8))
    blocks = np.concatenate(parts, axis=1)

    flags = (FLAG_BIAS if bias is not None else 0) | (FLAG_ROWSUM if rowsum else 0) | (FLAG_INTERLEAVED if interleave else 0)
    header = HEADER.pack(MAGIC, VERSION, bits, _TYPES[scale.dtype], zp_kind, zp_type, off_kind, off_type,
                         flags, group_size, n, k, zp_const, off_const)
    out = [header, blocks.tobytes()]
    if bias is not None:
        b = np.zeros((_pad(4 * n) // 4,), dtype=np.float32)
        b[:n] = bias.detach().float().numpy()
        out.append(b.tobytes())
    return b"".join(out)


def unpack(blob: bytes) -> PackedWeight:
    """The canonical tensors of a blob (the inverse of `pack`; for tests and tools)."""
    (magic, version, bits, st, zk, zt, ok, ot, flags, gs, n, k, zc, oc) = HEADER.unpack_from(blob, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not an ECW1 blob (magic {magic!r}, version {version})")
    g, nb, w = k // gs, -(-n // ROWS), codes_per_word(bits)
    group_code_len = ROWS * gs * bits // 8
    param_sizes = [ROWS * _SIZES[ParamType(st)]]
    if zk == ParamKind.PER_GROUP:
        param_sizes.append(ROWS * _SIZES[ParamType(zt)])
    if ok == ParamKind.PER_GROUP:
        param_sizes.append(ROWS * _SIZES[ParamType(ot)])
    rowsum_len = ALIGN if flags & FLAG_ROWSUM else 0
    interleaved = bool(flags & FLAG_INTERLEAVED)
    group_len = group_code_len + sum(param_sizes)
    sizes = [g * group_code_len] + [_pad(g * size) for size in param_sizes]  # the codes-first parts
    stride = _pad(g * group_len + rowsum_len) if interleaved else sum(sizes) + rowsum_len
    body = np.frombuffer(blob, dtype=np.uint8, count=nb * stride, offset=HEADER.size).reshape(nb, stride)
    if interleaved:
        grouped = body[:, : g * group_len].reshape(nb, g, group_len)
        code_part = grouped[:, :, :group_code_len]
        starts = np.cumsum([group_code_len] + param_sizes)
        param_parts = [grouped[:, :, a: a + size] for a, size in zip(starts, param_sizes)]
    else:
        pos = np.cumsum(sizes)
        code_part = body[:, : g * group_code_len]
        param_parts = [body[:, pos[i]: pos[i] + g * size].reshape(nb, g, size) for i, size in enumerate(param_sizes)]

    words = np.ascontiguousarray(code_part).reshape(nb, g, gs // w, ROWS, 4).transpose(0, 3, 1, 2, 4)  # [NB][16][G][C][4]
    if bits == 4:
        words = np.concatenate([words & 15, words >> 4], axis=-1)
    u = words.reshape(nb * ROWS, k)[:n].astype(np.int16)
    if bits == 4:
        q = u - 8
        lo, hi = (q[:, 0::2] + 8).astype(np.uint8), (q[:, 1::2] + 8).astype(np.uint8)
        qdata = torch.from_numpy(lo | (hi << 4))
    else:
        qdata = torch.from_numpy((u - 128).astype(np.int8))

    def param(i: int, ptype: int) -> torch.Tensor:
        dt = _TORCH[ParamType(ptype)]
        size = _SIZES[ParamType(ptype)]
        raw = np.ascontiguousarray(param_parts[i - 1])  # [NB][G][16 * size]
        np_dt = {1: np.uint8, 2: np.int16, 4: np.int32}[size]
        a = raw.view(np_dt).reshape(nb, g, ROWS).transpose(0, 2, 1).reshape(nb * ROWS, g)[:n]
        return torch.from_numpy(np.ascontiguousarray(a)).view(dt)

    scale = param(1, st)
    nxt = 2
    zero_point = offset = None
    if zk == ParamKind.PER_GROUP:
        zero_point, nxt = param(nxt, zt), nxt + 1
    elif zk == ParamKind.CONST:
        zero_point = torch.tensor([[zc]])
    if ok == ParamKind.PER_GROUP:
        offset = param(nxt, ot)
    elif ok == ParamKind.CONST:
        offset = torch.tensor([[oc]])
    bias = None
    if flags & FLAG_BIAS:
        bias = torch.from_numpy(np.frombuffer(blob, dtype=np.float32, count=n, offset=HEADER.size + nb * stride).copy())
    return PackedWeight(qdata, scale, zero_point, offset, bias, bits, gs)
