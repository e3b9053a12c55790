"""Phi-3: fused qkv / gate_up projections; ``config.sliding_window`` applies to every layer;
LongRoPE switches frequency sets with torch.where (traceable, updates the inv_freq buffer)."""

from __future__ import annotations

from typing import Any, ClassVar

from .base import FamilyAdapter, LayerAttention, ModelQuirks, register_adapter, rope_type_of


@register_adapter
class Phi3Adapter(FamilyAdapter):
    model_type = "phi3"
    supported_rope_types: ClassVar[frozenset[str]] = FamilyAdapter.supported_rope_types | {"longrope"}

    def quirks(self, config: Any) -> ModelQuirks:
        window = int(config.sliding_window or 0)
        return ModelQuirks(
            layers=tuple(LayerAttention(window) for _ in range(config.num_hidden_layers)),
            rope_type=rope_type_of(config),
        )
