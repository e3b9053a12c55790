"""torchao-quantized modules -> ember's canonical quantized modules, before ``torch.export``.

After ``quantize_model`` every quantized linear / embedding holds a torchao
``IntxUnpackedToInt8Tensor`` weight. Exported as they are, each linear traces torchao's whole
pattern (``dequantize_affine`` of the weight, and for the dynamic-activation schemes
``choose_qparams_affine`` / ``quantize_affine`` / ``dequantize_affine`` of the input), which the
``fuse_quantized_*`` passes then fold back into one ``ember::quantized_*`` call. That roughly
doubles the ops ``torch.export`` and decomposition walk through (a SmolLM2 8da4w export spent most
of its time there).

``to_canonical_modules`` does that fusion on the module tree instead: each such module becomes a
``QuantizedLinear`` / ``QuantizedEmbedding`` over torchao's own codes, scales and zero points
(taken as they are, 4-bit codes packed two per byte: nothing is re-rounded), with the activation
quantization torchao's tensor carries as the op's ``act_quant``. The exported call is exactly
what the passes produce from the traced pattern (tests/quant/test_canonical_modules.py checks the
two routes give the same file values), and the passes stay for models quantized by torchao
outside ember. A tied lm_head quantized like the embedding reads the embedding's very tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torchao.quantization import IntxUnpackedToInt8Tensor
from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import (
    IntxUnpackedToInt8TensorActivationQuantization as TorchaoActQuant,
)

from ember.export.quant_ops import ActQuant, bits_of_range, canonical_from_codes

from .modules import QuantizedEmbedding, QuantizedLinear, QuantizedWeight

__all__ = ["to_canonical_modules", "canonical_weight_of", "CanonicalConversion"]

_ACT_QUANT = {None: ActQuant.NONE, TorchaoActQuant.INT8_ASYM_PER_TOKEN: ActQuant.INT8_ASYM_PER_TOKEN}
_CODE_RANGE = {torch.int4: (-8, 7), torch.int8: (-128, 127)}


@dataclass(frozen=True)
class CanonicalConversion:
    linears: int  # modules now calling ember::quantized_linear
    embeddings: int  # modules now calling ember::quantized_embedding
    shared: int  # of those, modules reading another module's tensors (a tied lm_head)


def canonical_weight_of(name: str, weight: IntxUnpackedToInt8Tensor) -> QuantizedWeight:
    """torchao's [N, K] weight of module ``name`` in ember's canonical format (same values)."""
    n, k = weight.qdata.shape if weight.qdata.dim() == 2 else (0, 0)
    block = tuple(int(b) for b in weight.block_size)
    code_range = _CODE_RANGE.get(weight.target_dtype)
    if weight.qdata.dim() != 2 or len(block) != 2 or block[0] != 1 or code_range is None:
        raise ValueError(f"module '{name}': torchao weight {weight.target_dtype} with block size {list(block)} and "
                         f"shape {list(weight.qdata.shape)} has no canonical ember form; ember's recipes make "
                         "int4 / int8 weights in row groups (block size [1, group])")
    bits = bits_of_range(*code_range)
    group = block[1]
    if bits == 4 and (k % 2 or group % 2):
        raise ValueError(f"module '{name}': 4-bit codes are stored two per byte, so the row length ({k}) and group "
                         f"size ({group}) must be even")
    qdata, scale, zero_point = canonical_from_codes(weight.qdata, weight.scale, weight.zero_point, bits, group)
    return QuantizedWeight(qdata, scale, zero_point, None, bits, group)


def _same(a: QuantizedWeight, b: QuantizedWeight) -> bool:
    def eq(x: torch.Tensor | None, y: torch.Tensor | None) -> bool:
        return (x is None and y is None) or (x is not None and y is not None and x.dtype == y.dtype
                                             and x.shape == y.shape and torch.equal(x, y))

    return ((a.bits, a.group_size) == (b.bits, b.group_size) and eq(a.qdata, b.qdata) and eq(a.scale, b.scale)
            and eq(a.zero_point, b.zero_point) and eq(a.offset, b.offset))


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def to_canonical_modules(model: nn.Module) -> CanonicalConversion:
    """Replaces, in place, every ``nn.Linear`` / ``nn.Embedding`` whose weight is a torchao
    ``IntxUnpackedToInt8Tensor`` by the canonical ember module over the same values."""
    linears = embeddings = shared = 0
    tables: list[QuantizedWeight] = []  # the embeddings converted so far
    for name, module in list(model.named_modules()):
        if not isinstance(module, (nn.Linear, nn.Embedding)) or not isinstance(module.weight, IntxUnpackedToInt8Tensor):
            continue
        torchao_weight = module.weight
        weight = canonical_weight_of(name, torchao_weight)
        if isinstance(module, nn.Embedding):
            tables.append(weight)
        else:  # a tied lm_head quantized like the embedding: read the table's tensors (HF builds the embedding first)
            same = next((t for t in tables if _same(t, weight)), None)
            if same is not None:
                weight, shared = same, shared + 1
        if isinstance(module, nn.Embedding):
            # HF's scaled embeddings (gemma) multiply by an `embed_scale` buffer in forward.
            embed_scale = dict(module.named_buffers(recurse=False)).get("embed_scale")
            new: nn.Module = QuantizedEmbedding(weight, dtype=torchao_weight.dtype, embed_scale=embed_scale)
            embeddings += 1
        else:
            act = torchao_weight.activation_quantization
            if act not in _ACT_QUANT:
                raise ValueError(f"module '{name}': torchao activation quantization {act!r} has no ember op; "
                                 f"supported: {[a.value if a else None for a in _ACT_QUANT]}")
            bias = module.bias.detach() if module.bias is not None else None
            new = QuantizedLinear(weight, bias, act_quant=_ACT_QUANT[act])
            linears += 1
        _replace(model, name, new)
    return CanonicalConversion(linears, embeddings, shared)
