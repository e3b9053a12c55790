"""``FloatOffsetWeightConfig``: a torchao ``quantize_`` config for the ``asym-float`` mapping.

torchao's Intx configs store integer zero points, which cannot hit a group's exact min/max (and
cannot reproduce weights that already lie on a GGUF Q4_1 grid, where SmolLM2's 4-bit g32 error
drops from a 1.21 perplexity ratio to ~1.00). This config quantizes with torchao's own
float-zero-point primitives (the tinygemm min/max scheme: scale = (max - min) / (2^b - 1),
codes u = round((w - min) / scale)) and replaces the module with an ember module that calls the
canonical op directly: w = (u - 2^(b-1)) * scale + zero, exactly torchao's tinygemm dequantization.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchao.core.config import AOBaseConfig
from torchao.quantization import quant_primitives as qp
from torchao.quantization.transform_module import register_quantize_module_handler

from ember.export.quant_ops import ActQuant, pack_int4

from .modules import QuantizedEmbedding, QuantizedLinear, QuantizedWeight

__all__ = ["FloatOffsetWeightConfig", "quantize_float_offset"]


@dataclass
class FloatOffsetWeightConfig(AOBaseConfig):
    bits: int = 4
    group_size: int = 32  # 0: per channel
    scale_dtype: torch.dtype = torch.float32
    dynamic_activations: bool = False


def quantize_float_offset(w: torch.Tensor, bits: int, group_size: int, scale_dtype: torch.dtype
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[N, K] float -> (canonical qdata, scale [N, G], offset [N, G]) with torchao's tinygemm math.

    Scale and offset are rounded to ``scale_dtype`` first and the codes computed against the
    rounded values, so what the file stores is what the codes were chosen for.
    """
    n, k = w.shape
    qmin, qmax = 0, (1 << bits) - 1
    block = (1, group_size)
    w32 = w.detach().float()
    scale, zero = qp._choose_qparams_affine_tinygemm(
        w32, qp.MappingType.ASYMMETRIC, block, torch.int32, qmin, qmax, None, torch.float32, torch.float32)
    scale, zero = scale.to(scale_dtype), zero.to(scale_dtype)
    codes = qp._quantize_affine_tinygemm(w32, block, scale.float(), zero.float(), torch.int32, qmin, qmax)
    q = (codes - (1 << (bits - 1))).to(torch.int8)  # tinygemm's mid point: codes centred on zero
    qdata = pack_int4(q) if bits == 4 else q.contiguous()
    groups = k // group_size
    return qdata, scale.reshape(n, groups).contiguous(), zero.reshape(n, groups).contiguous()


@register_quantize_module_handler(FloatOffsetWeightConfig)
def _transform(module: torch.nn.Module, config: FloatOffsetWeightConfig) -> torch.nn.Module:
    w = module.weight
    group = w.shape[1] if config.group_size == 0 else config.group_size
    qdata, scale, offset = quantize_float_offset(w, config.bits, group, config.scale_dtype)
    weight = QuantizedWeight(qdata, scale, None, offset, config.bits, group)
    if isinstance(module, torch.nn.Embedding):
        # HF's scaled embeddings (gemma) multiply by an `embed_scale` buffer in forward.
        scale_buffer = dict(module.named_buffers(recurse=False)).get("embed_scale")
        return QuantizedEmbedding(weight, dtype=w.dtype, embed_scale=scale_buffer)
    act = ActQuant.INT8_ASYM_PER_TOKEN if config.dynamic_activations else ActQuant.NONE
    return QuantizedLinear(weight, module.bias, act_quant=act)
