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
            embedding_scale=float(config.hidden_size) ** 0.5,
            qk_norm=True,
            final_logit_softcap=float(config.final_logit_softcapping or 0.0),
            rope_type=rope_type_of(config),
            tied_embeddings=bool(config.tie_word_embeddings),
            extra={"query_pre_attn_scalar": float(config.query_pre_attn_scalar)},
        )
