"""Gemma 3 text (``gemma3_text``): QK-norm; embeddings scaled by sqrt(hidden_size); a
pattern of sliding-window and full layers (``config.layer_types``) with a separate RoPE
base for local layers. transformers 5.23 does not pass ``attn_logit_softcapping`` to
Gemma 3's attention (only the final logits are capped), so neither does ember."""

from __future__ import annotations

from typing import Any

from .base import FamilyAdapter, ModelQuirks, register_adapter, rope_type_of


@register_adapter
class Gemma3TextAdapter(FamilyAdapter):
    model_type = "gemma3_text"

    def quirks(self, config: Any) -> ModelQuirks:
        return ModelQuirks(
            layers=self.typed_layers(config),
            rope_type=rope_type_of(config),
        )
