"""Qwen2 / Qwen2.5: q/k/v biases; optional sliding window on the layers ``layer_types`` marks."""

from __future__ import annotations

from typing import Any

from .base import FamilyAdapter, ModelQuirks, register_adapter, rope_type_of


@register_adapter
class Qwen2Adapter(FamilyAdapter):
    model_type = "qwen2"

    def quirks(self, config: Any) -> ModelQuirks:
        return ModelQuirks(
            layers=self.typed_layers(config),
            rope_type=rope_type_of(config),
        )
