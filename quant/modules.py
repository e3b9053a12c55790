"""nn.Modules that hold a weight in ember's canonical quantized format and call the canonical ops.

``QuantizedWeight`` is one [N, K] weight in the format of ``ember.export.quant_ops`` (codes,
per-group scale, optional zero point and offset). ``QuantizedLinear`` and ``QuantizedEmbedding``
keep its tensors as buffers and call ``torch.ops.ember.quantized_linear`` /
``torch.ops.ember.quantized_embedding`` in forward, so ``torch.export`` captures the ops with
the tensors as constants. A tied embedding and lm_head are two modules built from the same
``QuantizedWeight``: they register the very same tensor objects, and the file stores them once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ember.export import quant_ops
from ember.export.quant_ops import ActQuant

__all__ = ["QuantizedWeight", "QuantizedLinear", "QuantizedEmbedding"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_QDATA_DTYPE = {4: torch.uint8, 8: torch.int8}


def _check_param(t: torch.Tensor | None, what: str, n: int, groups: int, dtypes: tuple[torch.dtype, ...]) -> None:
    if t is None:
        return
    if t.dim() != 2 or tuple(t.shape) not in ((n, groups), (1, 1)):
        raise ValueError(f"{what} must be [{n}, {groups}] or [1, 1], got {list(t.shape)}")
    if t.dtype not in dtypes:
        raise ValueError(f"{what} must be one of {[str(d) for d in dtypes]}, got {t.dtype}")


@dataclass(frozen=True)
class QuantizedWeight:
    """One [N, K] weight: ``w = (q - zero_point) * scale + offset`` per group of ``group_size``
    columns, in fp32 (see ``ember.export.quant_ops``). Validated on construction."""

    qdata: torch.Tensor  # bits 4: uint8 [N, K / 2] (two codes per byte); bits 8: int8 [N, K]
    scale: torch.Tensor  # fp32 / fp16 / bf16 [N, K / group_size]
    zero_point: torch.Tensor | None  # None, or int8 / float [N, K / group_size] or [1, 1]
    offset: torch.Tensor | None  # None, or float [N, K / group_size] or [1, 1]
    bits: int
    group_size: int

    def __post_init__(self) -> None:
        if self.bits not in _QDATA_DTYPE:
            raise ValueError(f"bits must be one of {sorted(_QDATA_DTYPE)}, got {self.bits}")
        if self.qdata.dim() != 2 or self.qdata.dtype != _QDATA_DTYPE[self.bits]:
            raise ValueError(f"{self.bits}-bit qdata must be a 2-D {_QDATA_DTYPE[self.bits]} tensor, "
                             f"got {self.qdata.dtype} {list(self.qdata.shape)}")
        n, k = self.shape
        if self.group_size <= 0 or k % self.group_size:
            raise ValueError(f"group_size {self.group_size} does not divide the row length {k}")
        groups = k // self.group_size
        if tuple(self.scale.shape) != (n, groups) or self.scale.dtype not in _FLOATS:
            raise ValueError(f"scale must be a float [{n}, {groups}] tensor, "
                             f"got {self.scale.dtype} {list(self.scale.shape)}")
        _check_param(self.zero_point, "zero_point", n, groups, (torch.int8, *_FLOATS))
        _check_param(self.offset, "offset", n, groups, _FLOATS)

    @property
    def shape(self) -> tuple[int, int]:
        """(N, K) of the weight the codes stand for."""
        n, width = self.qdata.shape
        return n, width * 2 if self.bits == 4 else width

    @property
    def nbytes(self) -> int:
        """Bytes in a file: codes and every per-group parameter."""
        return quant_ops.weight_bytes(self.qdata, self.scale, self.zero_point, self.offset)

    def dequantize(self) -> torch.Tensor:
        """The fp32 [N, K] weight. The same fp32 operations in the same order as
        ``quant_ops.dequantize_weight`` (so the same bits), with the per-group parameters broadcast
        over [N, groups, group_size] instead of repeated: about twice as fast on large tables."""
        n, k = self.shape
        w = quant_ops.unpack_int4(self.qdata) if self.bits == 4 else self.qdata
        w = w.float().view(n, k // self.group_size, self.group_size)  # [N, G, group_size]
        if self.zero_point is not None:
            w -= self.zero_point.float().unsqueeze(-1)
        w *= self.scale.float().unsqueeze(-1)
        if self.offset is not None:
            w += self.offset.float().unsqueeze(-1)
        return w.view(n, k)

    def select_rows(self, index: torch.Tensor) -> "QuantizedWeight":
        """Rows ``index`` (int64 [N]) of the weight: exact, since groups run along rows."""

        def rows(t: torch.Tensor | None) -> torch.Tensor | None:
            return t if t is None or t.shape[0] == 1 else t.index_select(0, index).contiguous()

        return QuantizedWeight(rows(self.qdata), rows(self.scale), rows(self.zero_point), rows(self.offset),
                               self.bits, self.group_size)


def _register(module: nn.Module, weight: QuantizedWeight) -> None:
    module.register_buffer("qdata", weight.qdata)
    module.register_buffer("scale", weight.scale)
    module.register_buffer("zero_point", weight.zero_point)  # None stays None (not in the state dict)
    module.register_buffer("offset", weight.offset)
    module.bits = weight.bits
    module.group_size = weight.group_size


class QuantizedLinear(nn.Module):
    """``y = linear(act(x), dequantized weight, bias)`` through ``ember::quantized_linear``."""

    def __init__(self, weight: QuantizedWeight, bias: torch.Tensor | None = None,
                 act_quant: ActQuant = ActQuant.NONE) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        if bias is not None and tuple(bias.shape) != (self.out_features,):
            raise ValueError(f"bias must be [{self.out_features}], got {list(bias.shape)}")
        _register(self, weight)
        self.register_buffer("bias", None if bias is None else bias.detach())  # [N]
        self.act_quant = ActQuant(act_quant)

    @property
    def weight_data(self) -> QuantizedWeight:
        """The weight as a ``QuantizedWeight`` over this module's buffers (no copy)."""
        return QuantizedWeight(self.qdata, self.scale, self.zero_point, self.offset, self.bits, self.group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., K] -> [..., N]
        return torch.ops.ember.quantized_linear(x, self.qdata, self.scale, self.zero_point, self.offset, self.bias,
                                                self.bits, self.group_size, int(self.act_quant))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
                f"group_size={self.group_size}, bias={self.bias is not None}, act_quant={self.act_quant.name}")


class QuantizedEmbedding(nn.Module):
    """Rows of the dequantized [num_embeddings, embedding_dim] table through
    ``ember::quantized_embedding``, in ``dtype``; times ``embed_scale`` when given (a 0-d
    tensor, as HF's scaled word embeddings multiply by it in the weight's dtype)."""

    def __init__(self, weight: QuantizedWeight, dtype: torch.dtype = torch.float32,
                 embed_scale: torch.Tensor | None = None) -> None:
        super().__init__()
        if dtype not in _FLOATS:
            raise ValueError(f"dtype must be one of {[str(d) for d in _FLOATS]}, got {dtype}")
        if embed_scale is not None and embed_scale.dim() != 0:
            raise ValueError(f"embed_scale must be a 0-d tensor, got shape {list(embed_scale.shape)}")
        self.num_embeddings, self.embedding_dim = weight.shape
        _register(self, weight)
        self.dtype = dtype
        self.register_buffer("embed_scale", None if embed_scale is None else embed_scale.detach().clone(),
                             persistent=False)

    @property
    def weight_data(self) -> QuantizedWeight:
        """The table as a ``QuantizedWeight`` over this module's buffers (no copy)."""
        return QuantizedWeight(self.qdata, self.scale, self.zero_point, self.offset, self.bits, self.group_size)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:  # int [...] -> [..., embedding_dim]
        out = torch.ops.ember.quantized_embedding(self.qdata, self.scale, self.zero_point, self.offset, indices,
                                                  self.bits, self.group_size, self.dtype)
        if self.embed_scale is not None:
            out = out * self.embed_scale.to(self.dtype)
        return out

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, bits={self.bits}, group_size={self.group_size}, "
                f"dtype={self.dtype}" + (", scaled" if self.embed_scale is not None else ""))
