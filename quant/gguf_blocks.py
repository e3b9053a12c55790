"""GGUF block formats -> ember's canonical quantized weight, exactly.

One converter per GGML type turns a [rows, cols] tensor's raw blocks (uint8 [rows, bytes per
row], as ``gguf.GGUFReader`` maps them) into a ``QuantizedWeight`` whose canonical
dequantization (``ember.export.quant_ops.dequantize_weight``) equals ``gguf.quants.dequantize``
bit for bit. Each converter unpacks the codes exactly as gguf-py does and keeps gguf-py's fp32
operations: wherever gguf-py multiplies two stored numbers (a K-quant's super-block scale by a
6-bit sub-block scale) the product is computed here with the same numpy fp32 operation and
stored in fp32; where gguf-py uses a stored fp16 number as is, it stays fp16 (so Q4_0, Q4_1,
Q5_0, Q5_1 and Q8_0 keep their GGUF size). Then

  gguf-py             canonical (q - zero_point) * scale + offset, fp32 at every step
  Q4_0  d * (u - 8)                 q = u - 8 (4-bit), scale d
  Q4_1  d * u + m                   q = u - 8 (4-bit), zero_point -8, scale d, offset m
  Q5_0  d * (u - 16)                q = u - 16 (int8), scale d
  Q5_1  d * u + m                   q = u (int8), scale d, offset m
  Q8_0  q * d                       q (int8), scale d
  Q2_K  (d*sc) * u - (dmin*m)       q = u - 8 (4-bit), zero_point -8, scale d*sc, offset -(dmin*m), groups of 16
  Q3_K  (d*(sc-32)) * q             q (4-bit, in [-4, 3]), scale d*(sc-32), groups of 16
  Q4_K  (d*sc) * u - (dmin*m)       q = u - 8 (4-bit), zero_point -8, scale d*sc, offset -(dmin*m), groups of 32
  Q5_K  (d*sc) * u - (dmin*m)       q = u (int8, 0..31), scale d*sc, offset -(dmin*m), groups of 32
  Q6_K  (d*sc) * (u - 32)           q = u - 32 (int8), scale d*sc, groups of 16

is the same float arithmetic: u - (-8) is exact in fp32, products commute, and x - y is x + (-y)
in IEEE arithmetic. ``tests/quant/test_gguf_import.py`` checks every type bit for bit.

F32, F16 and BF16 tensors are not quantized: ``convert_gguf_tensor`` returns them as float
tensors in their own dtype. Any other type (the IQ*, TQ*, MXFP4 grids are not affine) raises
``UnsupportedGGUFType``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, QK_K, GGMLQuantizationType
from gguf.quants import Q4_K as _GGUF_Q4_K

from .modules import QuantizedWeight

__all__ = ["UnsupportedGGUFType", "convert_gguf_tensor", "unsupported_type_error", "QUANTIZED_TYPES", "FLOAT_TYPES",
           "SUPPORTED_TYPES"]

QT = GGMLQuantizationType
Blocks = np.ndarray  # uint8 [n_blocks, bytes per block], blocks in row-major order
Converter = Callable[[Blocks, int, int], QuantizedWeight]  # (blocks, rows, cols)

_CONVERTERS: dict[GGMLQuantizationType, Converter] = {}
FLOAT_TYPES = (QT.F32, QT.F16, QT.BF16)


class UnsupportedGGUFType(ValueError):
    """A GGUF tensor type ember cannot import exactly (the message names the tensor and type)."""


def _converter(qtype: GGMLQuantizationType) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        _CONVERTERS[qtype] = fn
        return fn

    return register


# ---- helpers (numpy, mirroring gguf/quants.py) ----------------------------------------------------

_NIBBLES = np.array([0, 4], dtype=np.uint8)  # shifts of the 4-bit fields of a byte
_CRUMBS = np.array([0, 2, 4, 6], dtype=np.uint8)  # shifts of the 2-bit fields
_BITS = np.arange(8, dtype=np.uint8)  # shifts of the 1-bit fields
_MINUS_8 = torch.tensor([[-8]], dtype=torch.int8)  # [1, 1]: codes u in 0..15 stored as u - 8


def _f16(b: np.ndarray) -> np.ndarray:
    """uint8 [n, 2] -> fp16 [n, 1] (a copy, so the result does not pin the mapped file)."""
    return np.ascontiguousarray(b).view(np.float16)


def _f32(b: np.ndarray) -> np.ndarray:
    return _f16(b).astype(np.float32)


def _pack4(u: np.ndarray, rows: int) -> torch.Tensor:
    """Codes u in 0..15 (q = u - 8), [n_blocks, block] in element order -> uint8 [rows, cols / 2]:
    low nibble q[2j] + 8 = u[2j], high nibble u[2j + 1] (the canonical packing)."""
    u = u.reshape(rows, -1).astype(np.uint8)
    return torch.from_numpy(np.ascontiguousarray(u[:, 0::2] | (u[:, 1::2] << np.uint8(4))))


def _int8(q: np.ndarray, rows: int) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(q.reshape(rows, -1).astype(np.int8)))


def _groups(x: np.ndarray, rows: int) -> torch.Tensor:
    """Per-group parameters in element order -> [rows, groups] in x's dtype."""
    return torch.from_numpy(np.ascontiguousarray(x.reshape(rows, -1)))


def _low_high_32(qs: np.ndarray, n: int, width: int) -> np.ndarray:
    """gguf-py's nibble order: each run of ``width`` bytes gives ``width`` low nibbles, then
    ``width`` high nibbles. uint8 [n, bytes] -> uint8 [n, 2 * bytes] in 0..15."""
    return ((qs.reshape(n, -1, 1, width) >> _NIBBLES.reshape(1, 1, 2, 1)) & np.uint8(0x0F)).reshape(n, -1)


def _q5_high_bits(qh: np.ndarray, n: int) -> np.ndarray:
    """Q5_0/Q5_1: bit j of the block's little-endian uint32 is the 5th bit of element j."""
    qh = np.ascontiguousarray(qh).view(np.uint32).reshape(n, 1) >> np.arange(32, dtype=np.uint32).reshape(1, 32)
    return (qh & np.uint32(1)).astype(np.uint8)


# ---- 32-element blocks ---------------------------------------------------------------------------

@_converter(QT.Q4_0)
def _q4_0(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # d f16 | qs[16]
    n = blocks.shape[0]
    u = _low_high_32(blocks[:, 2:], n, 16)
    return QuantizedWeight(_pack4(u, rows), _groups(_f16(blocks[:, :2]), rows), None, None, 4, 32)


@_converter(QT.Q4_1)
def _q4_1(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # d f16 | m f16 | qs[16]
    n = blocks.shape[0]
    u = _low_high_32(blocks[:, 4:], n, 16)
    return QuantizedWeight(_pack4(u, rows), _groups(_f16(blocks[:, :2]), rows), _MINUS_8.clone(),
                           _groups(_f16(blocks[:, 2:4]), rows), 4, 32)


@_converter(QT.Q5_0)
def _q5_0(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # d f16 | qh u32 | qs[16]
    n = blocks.shape[0]
    u = _low_high_32(blocks[:, 6:], n, 16) | (_q5_high_bits(blocks[:, 2:6], n) << np.uint8(4))
    return QuantizedWeight(_int8(u.astype(np.int8) - np.int8(16), rows), _groups(_f16(blocks[:, :2]), rows),
                           None, None, 8, 32)


@_converter(QT.Q5_1)
def _q5_1(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # d f16 | m f16 | qh u32 | qs[16]
    n = blocks.shape[0]
    u = _low_high_32(blocks[:, 8:], n, 16) | (_q5_high_bits(blocks[:, 4:8], n) << np.uint8(4))
    return QuantizedWeight(_int8(u, rows), _groups(_f16(blocks[:, :2]), rows), None,
                           _groups(_f16(blocks[:, 2:4]), rows), 8, 32)


@_converter(QT.Q8_0)
def _q8_0(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # d f16 | qs int8[32]
    q = np.ascontiguousarray(blocks[:, 2:]).view(np.int8)
    return QuantizedWeight(_int8(q, rows), _groups(_f16(blocks[:, :2]), rows), None, None, 8, 32)


# ---- 256-element super-blocks (K-quants) ---------------------------------------------------------

@_converter(QT.Q2_K)
def _q2_k(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # scales[16] | qs[64] | d f16 | dmin f16
    n = blocks.shape[0]
    scales, qs = blocks[:, :16], blocks[:, 16:80]
    d, dmin = _f32(blocks[:, 80:82]), _f32(blocks[:, 82:84])
    dl = d * (scales & 0xF).astype(np.float32)  # fp32 [n, 16]
    ml = dmin * (scales >> 4).astype(np.float32)
    u = ((qs.reshape(n, -1, 1, 32) >> _CRUMBS.reshape(1, 1, 4, 1)) & np.uint8(3)).reshape(n, QK_K)
    return QuantizedWeight(_pack4(u, rows), _groups(dl, rows), _MINUS_8.clone(), _groups(-ml, rows), 4, 16)


@_converter(QT.Q3_K)
def _q3_k(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # hmask[32] | qs[64] | scales[12] | d f16
    n = blocks.shape[0]
    hmask, qs, scales = blocks[:, :32], blocks[:, 32:96], blocks[:, 96:108]
    d = _f32(blocks[:, 108:110])
    lscales = (scales[:, :8].reshape(n, 1, 8) >> _NIBBLES.reshape(1, 2, 1)).reshape(n, 16)
    hscales = (scales[:, 8:].reshape(n, 1, 4) >> _CRUMBS.reshape(1, 4, 1)).reshape(n, 16)
    sc = ((lscales & np.uint8(0x0F)) | ((hscales & np.uint8(0x03)) << np.uint8(4))).astype(np.int8) - np.int8(32)
    dl = d * sc.astype(np.float32)  # fp32 [n, 16]
    ql = (qs.reshape(n, -1, 1, 32) >> _CRUMBS.reshape(1, 1, 4, 1)).reshape(n, QK_K) & np.uint8(3)
    qh = (hmask.reshape(n, -1, 1, 32) >> _BITS.reshape(1, 1, 8, 1)).reshape(n, QK_K) & np.uint8(1)
    q = ql.astype(np.int8) - ((qh ^ np.uint8(1)) << np.uint8(2)).astype(np.int8)  # in [-4, 3]
    return QuantizedWeight(_pack4(q + 8, rows), _groups(dl, rows), None, None, 4, 16)


def _k_scales(blocks: Blocks) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: fp32 [n, 8] sub-block scales d * sc and offsets -(dmin * m), as gguf-py computes them."""
    d, dmin = _f32(blocks[:, 0:2]), _f32(blocks[:, 2:4])
    sc, m = _GGUF_Q4_K.get_scale_min(np.ascontiguousarray(blocks[:, 4:16]))
    return d * sc.astype(np.float32), -(dmin * m.astype(np.float32))


@_converter(QT.Q4_K)
def _q4_k(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # d | dmin | scales[12] | qs[128]
    n = blocks.shape[0]
    scale, offset = _k_scales(blocks)
    u = _low_high_32(blocks[:, 16:], n, 32)
    return QuantizedWeight(_pack4(u, rows), _groups(scale, rows), _MINUS_8.clone(), _groups(offset, rows), 4, 32)


@_converter(QT.Q5_K)
def _q5_k(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # d | dmin | scales[12] | qh[32] | qs[128]
    n = blocks.shape[0]
    scale, offset = _k_scales(blocks)
    ql = _low_high_32(blocks[:, 48:], n, 32)
    qh = ((blocks[:, 16:48].reshape(n, -1, 1, 32) >> _BITS.reshape(1, 1, 8, 1))
          & np.uint8(0x01)).reshape(n, QK_K)
    return QuantizedWeight(_int8(ql | (qh << np.uint8(4)), rows), _groups(scale, rows), None,
                           _groups(offset, rows), 8, 32)


@_converter(QT.Q6_K)
def _q6_k(blocks: Blocks, rows: int, cols: int) -> QuantizedWeight:  # ql[128] | qh[64] | scales int8[16] | d f16
    n = blocks.shape[0]
    ql, qh = blocks[:, :128], blocks[:, 128:192]
    sc = np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(np.float32)
    scale = _f32(blocks[:, 208:210]) * sc  # fp32 [n, 16]
    ql = ((ql.reshape(n, -1, 1, 64) >> _NIBBLES.reshape(1, 1, 2, 1)) & np.uint8(0x0F)).reshape(n, QK_K)
    qh = ((qh.reshape(n, -1, 1, 32) >> _CRUMBS.reshape(1, 1, 4, 1))
          & np.uint8(0x03)).reshape(n, QK_K)
    q = (ql | (qh << np.uint8(4))).astype(np.int8) - np.int8(32)
    return QuantizedWeight(_int8(q, rows), _groups(scale, rows), None, None, 8, 16)


QUANTIZED_TYPES = tuple(_CONVERTERS)
SUPPORTED_TYPES = QUANTIZED_TYPES + FLOAT_TYPES


def unsupported_type_error(name: str, qtype: GGMLQuantizationType) -> UnsupportedGGUFType:
    return UnsupportedGGUFType(
        f"GGUF tensor {name!r} has type {QT(qtype).name}, which ember cannot import exactly; supported: "
        f"{', '.join(t.name for t in SUPPORTED_TYPES)}. Export without quant='gguf' to load it dequantized "
        "to float (and optionally re-quantize with a torchao recipe)"
    )


def _float_tensor(raw: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> torch.Tensor:
    if qtype == QT.BF16:  # numpy has no bfloat16: the reader maps raw bytes
        bits = np.ascontiguousarray(raw).view(np.int16).reshape(shape)
        return torch.from_numpy(bits.copy()).view(torch.bfloat16)
    dtype = np.float32 if qtype == QT.F32 else np.float16
    return torch.from_numpy(np.array(np.ascontiguousarray(raw).view(dtype).reshape(shape)))


def convert_gguf_tensor(name: str, raw: np.ndarray, qtype: GGMLQuantizationType,
                        shape: tuple[int, ...]) -> QuantizedWeight | torch.Tensor:
    """A GGUF tensor -> ``QuantizedWeight`` (quantized types, ``shape`` = (rows, cols)) or a float
    tensor of ``shape`` in its own dtype (F32 / F16 / BF16).

    ``raw``: the tensor's data as ``gguf.GGUFReader`` maps it (``ReaderTensor.data``); ``shape``
    in PyTorch order (rows first: the reverse of GGUF's ``ne``). The result owns its memory.
    """
    qtype = QT(qtype)
    if qtype in FLOAT_TYPES:
        return _float_tensor(raw, qtype, shape)
    convert = _CONVERTERS.get(qtype)
    if convert is None:
        raise unsupported_type_error(name, qtype)
    if len(shape) != 2:
        raise ValueError(f"GGUF tensor {name!r} ({qtype.name}) has shape {list(shape)}: "
                         "only matrices are imported quantized")
    rows, cols = shape
    block, size = GGML_QUANT_SIZES[qtype]
    if cols % block or raw.size != rows * cols // block * size:
        raise ValueError(f"GGUF tensor {name!r} ({qtype.name}, shape {list(shape)}) has {raw.size} bytes; "
                         f"expected {rows * cols // block * size} ({block}-element blocks of {size} bytes)")
    return convert(np.asarray(raw).view(np.uint8).reshape(-1, size), rows, cols)
