"""Mistral: ``config.sliding_window`` (when set) applies to every layer."""

from __future__ import annotations

from typing import Any

from .base import FamilyAdapter, LayerAttention, ModelQuirks, register_adapter, rope_type_of


@register_adapter
class MistralAdapter(FamilyAdapter):
    model_type = "mistral"

    def quirks(self, config: Any) -> ModelQuirks:
        window = int(config.sliding_window or 0)
        return ModelQuirks(
            layers=tuple(LayerAttention(window) for _ in range(config.num_hidden_layers)),
            rope_type=rope_type_of(config),
        )
