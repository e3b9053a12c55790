"""One ``WeightQuant`` -> the torchao ``quantize_`` config that produces it."""

from __future__ import annotations

import torch
from torchao.core.config import AOBaseConfig
from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_primitives import MappingType
from torchao.quantization.quantize_.workflows import IntxChooseQParamsAlgorithm

from .recipe import PER_CHANNEL, Algorithm, Mapping, WeightQuant

__all__ = ["torchao_config"]

_SCALE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_ALGORITHMS = {Algorithm.AFFINE: IntxChooseQParamsAlgorithm.AFFINE, Algorithm.HQQ: IntxChooseQParamsAlgorithm.HQQ_SCALE_ONLY}
_MAPPINGS = {Mapping.SYMMETRIC: MappingType.SYMMETRIC, Mapping.ASYMMETRIC: MappingType.ASYMMETRIC}


def torchao_config(quant: WeightQuant) -> AOBaseConfig:
    scale_dtype = _SCALE_DTYPES[quant.scale_dtype.value]
    if quant.mapping is Mapping.FLOAT_OFFSET:
        from .float_offset import FloatOffsetWeightConfig

        return FloatOffsetWeightConfig(bits=quant.bits, group_size=quant.group_size, scale_dtype=scale_dtype,
                                       dynamic_activations=quant.scheme.dynamic_activations)
    weight_dtype = torch.int4 if quant.bits == 4 else torch.int8
    granularity = PerAxis(0) if quant.group_size == PER_CHANNEL else PerGroup(quant.group_size)
    if quant.scheme.dynamic_activations:
        return Int8DynamicActivationIntxWeightConfig(
            weight_dtype=weight_dtype, weight_granularity=granularity, weight_mapping_type=_MAPPINGS[quant.mapping],
            weight_scale_dtype=scale_dtype, intx_choose_qparams_algorithm=_ALGORITHMS[quant.algorithm])
    return IntxWeightOnlyConfig(
        weight_dtype=weight_dtype, granularity=granularity, mapping_type=_MAPPINGS[quant.mapping],
        scale_dtype=scale_dtype, intx_choose_qparams_algorithm=_ALGORITHMS[quant.algorithm])
