"""Gemma 2: embeddings scaled by sqrt(hidden_size); attention scores and final logits
soft-capped; sliding-window and full layers alternate (``config.layer_types``); attention
scale is query_pre_attn_scalar**-0.5; extra post-attention/post-MLP norms."""

from __future__ import annotations

from typing import Any

from .base import FamilyAdapter, ModelQuirks, register_adapter, rope_type_of


@register_adapter
class Gemma2Adapter(FamilyAdapter):
    model_type = "gemma2"

    def quirks(self, config: Any) -> ModelQuirks:
        return ModelQuirks(
            layers=self.typed_layers(config, softcap=float(config.attn_logit_softcapping or 0.0)),
            rope_type=rope_type_of(config),
        )
