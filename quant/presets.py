"""Named recipes (``--quant PRESET`` / ``export_llm(quant="q4")``); README has their measured table.

``gguf`` is not a recipe: it keeps a GGUF source's own blocks (see ``ember.quant.gguf``).
"""

from __future__ import annotations

from .recipe import PER_CHANNEL, Mapping, QuantRecipe, ScaleDType, Scheme, WeightQuant

__all__ = ["PRESETS", "GGUF", "get_preset", "preset_names"]

GGUF = "gguf"

PRESETS: dict[str, QuantRecipe] = {
    # Near-lossless: int8 per-channel linears; the embedding table (also the lm_head when tied, stored
    # once) in int8 groups of 32 with fp16 scales, as GGUF's Q8_0. The table decides the quality: on
    # SmolLM2 a per-channel table costs 0.5% perplexity (KL 0.0042), groups of 32 cost 0.02% (0.0035).
    "q8": QuantRecipe(
        linear=WeightQuant(Scheme.W8, PER_CHANNEL),
        embedding=WeightQuant(Scheme.W8, 32, scale_dtype=ScaleDType.FLOAT16),
        name="q8"),
    # ember's 4-bit mix: int4 groups of 32 with the group's own min/max (float offset, fp16
    # scales and offsets, 5 bits per weight); the embedding table and lm_head in int8 groups of 64
    # with fp16 scales (8.25 bits; per channel, the table alone made KL 2.6x worse on SmolLM2).
    "q4": QuantRecipe(
        linear=WeightQuant(Scheme.W4, 32, Mapping.FLOAT_OFFSET, scale_dtype=ScaleDType.FLOAT16),
        embedding=WeightQuant(Scheme.W8, 64, scale_dtype=ScaleDType.FLOAT16),
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
