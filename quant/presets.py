"""Named recipes (``--quant PRESET`` / ``export_llm(quant="q4")``); README has their measured table.

``gguf`` is not a recipe: it keeps a GGUF source's own blocks (see ``ember.quant.gguf``).
"""

from __future__ import annotations

from .recipe import PER_CHANNEL, Mapping, QuantRecipe, ScaleDType, Scheme, WeightQuant

__all__ = ["PRESETS", "GGUF", "get_preset", "preset_names"]

GGUF = "gguf"

PRESETS: dict[str, QuantRecipe] = {
    # Near-lossless: int8 per-channel weights everywhere, one shared table for a tied lm_head.
    "q8": QuantRecipe(
        linear=WeightQuant(Scheme.W8, PER_CHANNEL),
        embedding=WeightQuant(Scheme.W8, PER_CHANNEL),
        name="q8"),
    # ember's 4-bit mix: int4 groups of 32 with the group's own min/max (float offset, fp16
    # scales and offsets, 5 bits per weight), int8 embedding and lm_head.
    "q4": QuantRecipe(
        linear=WeightQuant(Scheme.W4, 32, Mapping.FLOAT_OFFSET, scale_dtype=ScaleDType.FLOAT16),
        embedding=WeightQuant(Scheme.W8, PER_CHANNEL),
        name="q4"),
    # ExecuTorch's usual mobile recipe: 8da4w g32 symmetric linears, 8-bit embedding.
    "8da4w": QuantRecipe(
        linear=WeightQuant(Scheme.DA8W4, 32),
        embedding=WeightQuant(Scheme.W8, PER_CHANNEL),
        name="8da4w"),
}


def preset_names() -> list[str]:
    return [*PRESETS, GGUF]


def get_preset(name: str) -> QuantRecipe:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"quantization preset {name!r} is unknown; use one of {preset_names()} "
                         "or build a recipe with --qlinear/--qembedding") from None
