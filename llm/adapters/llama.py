"""Llama family (Llama 2/3.x incl. llama3 rope scaling, SmolLM/SmolLM2, TinyLlama, ...)."""

from __future__ import annotations

from typing import Any

from .base import FamilyAdapter, ModelQuirks, register_adapter, rope_type_of


@register_adapter
class LlamaAdapter(FamilyAdapter):
    model_type = "llama"

    def quirks(self, config: Any) -> ModelQuirks:
        return ModelQuirks(
            layers=self.full_layers(config),
            rope_type=rope_type_of(config),
        )
