"""What the weight-only quantized linears of an export compute with (``--qactivations``).

Weight-only linears (the ``4w``/``8w`` schemes, the q4/q8 presets, a tied lm_head reading the
embedding's table, and every block of ``--quant gguf``) multiply float activations by default:
the dequantized weight times the exact input. ``int8`` quantizes their input dynamically per
group of the weight's own group size (symmetric, ``d = max|x| / 127``), as llama.cpp quantizes
activations to Q8_0/Q8_1 before its Q4_0/Q4_1/K-quant dot products. The CPU delegate then sums
the products exactly in int32 (VPDPBUSD / VPMADDUBSW), which costs about a quarter of the float
kernels' instructions; the price is the activations' rounding, which ``ember eval`` measures.
Linears that already quantize activations (``8da4w``, ``8da8w``) keep their own scheme.
"""

from __future__ import annotations

from torch import nn

from ember.export.quant_ops import ActQuant

from .modules import QuantizedLinear
from .recipe import LinearActivations

__all__ = ["LinearActivations", "apply_linear_activations"]


def apply_linear_activations(model: nn.Module, activations: LinearActivations) -> int:
    """Sets the activations of every weight-only ``QuantizedLinear`` of ``model``; returns how many
    linears changed (0 for FLOAT, which leaves the model as it is)."""
    if activations is LinearActivations.FLOAT:
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, QuantizedLinear) and module.act_quant is ActQuant.NONE:
            module.act_quant = ActQuant.INT8_SYM_PER_GROUP
            changed += 1
    return changed
