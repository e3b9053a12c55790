"""Qwen3 (dense): RMSNorm on q and k per head (QK-norm), optional sliding layers."""

from __future__ import annotations

from typing import Any

from .base import FamilyAdapter, ModelQuirks, register_adapter, rope_type_of


@register_adapter
class Qwen3Adapter(FamilyAdapter):
    model_type = "qwen3"

    def quirks(self, config: Any) -> ModelQuirks:
        return ModelQuirks(
            layers=self.typed_layers(config),
            rope_type=rope_type_of(config),
        )
