"""Every place ember depends on a transformers detail lives here (checked with 5.23).

Quirks relied on (re-check these when upgrading transformers):
- Attention functions are plugged through ``AttentionInterface.register(name, fn)``
  and selected with ``model.set_attn_implementation(name)``. HF attention modules
  call ``fn(module, q, k, v, attention_mask, scaling=..., dropout=..., **kwargs)``
  where q is [B, Hq, T, D], k/v are what ``past_key_values.update`` returned, and
  families with windows/capping add ``sliding_window=`` (None or int, also passed
  for every layer by mistral/phi3) and ``softcap=`` (None or float, gemma2).
  Extra keyword arguments given to ``model(...)`` reach ``fn`` through ``**kwargs``:
  that is how the step's ``input_pos`` (and ember's cache, for an int8 cache's scales) gets
  to the attention; ``module.layer_idx`` names the layer.
- An attention name that is NOT registered in ``AttentionMaskInterface`` makes
  ``create_causal_mask``/``create_sliding_window_causal_mask`` return None without
  building a [T, S] mask (masking_utils._preprocess_mask_arguments): attend_cache
  does its own causal/window masking, so nothing is registered there on purpose.
- ``Cache(layers=[...])`` with ``CacheLayerMixin`` layers is the cache protocol:
  modeling code calls ``past_key_values.update(k, v, layer_idx)`` and uses the
  returned pair as keys/values; mask helpers read ``is_sliding``.
- ``position_ids`` given explicitly are used for RoPE (no ``cache_position`` in 5.x).
- ``logits_to_keep=1`` makes ``*ForCausalLM`` project only the last position.
- Head geometry: ``config.head_dim`` may be absent or None (then hidden/heads).
"""

from __future__ import annotations

from typing import Any


import torch
from transformers import AttentionInterface, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, CacheLayerMixin

from . import ops as ember_ops
from .adapters.base import LayerAttention
from .kv_cache import CacheGeometry, StaticKVCache

__all__ = [
    "ATTN_IMPLEMENTATION",
    "INPUT_POS_KWARG",
    "LAYERS_KWARG",
    "use_ember_attention",
    "make_hf_cache",
    "cache_geometry",
    "text_config",
    "causal_lm_logits",
]

ATTN_IMPLEMENTATION = "ember_attend_cache"
INPUT_POS_KWARG = "ember_input_pos"
LAYERS_KWARG = "ember_layers"
CACHE_KWARG = "ember_cache"


def _ember_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, Hq, T, D]
    key: torch.Tensor,  # [B, Hkv, S, D], the whole cache of this layer
    value: torch.Tensor,  # [B, Hkv, S, D]
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    input_pos = kwargs.get(INPUT_POS_KWARG)
    if input_pos is None:
        raise RuntimeError(
            f"the '{ATTN_IMPLEMENTATION}' attention needs `{INPUT_POS_KWARG}=` in the model call; "
            "run the model through ember.llm's ExportableLLM instead of calling it directly"
        )
    if attention_mask is not None:
        raise RuntimeError(
            "ember attention got a materialized attention mask; transformers built one for an attention name "
            f"that has no mask function ({ATTN_IMPLEMENTATION}) — this transformers version is not supported"
        )
    window = int(sliding_window) if sliding_window else 0
    cap = float(softcap) if softcap else 0.0
    expected: tuple[LayerAttention, ...] | None = kwargs.get(LAYERS_KWARG)
    if expected is not None:
        layer = expected[module.layer_idx]
        if (layer.sliding_window, layer.softcap) != (window, cap):
            raise RuntimeError(
                f"layer {module.layer_idx}: transformers attends with sliding_window={window}, softcap={cap} but "
                f"the family adapter expects {layer}; the adapter is out of date for this transformers version"
            )
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    cache: StaticKVCache | None = kwargs.get(CACHE_KWARG)
    if cache is not None and cache.quantized:
        k_scales, v_scales = cache.scales(module.layer_idx)  # fp32 [B, Hkv, S, 1]
        out = torch.ops.ember.attend_cache_int8(query, key, k_scales, value, v_scales, input_pos, scale, window, cap)
    else:
        out = torch.ops.ember.attend_cache(query, key, value, input_pos, scale, window, cap)  # [B, T, Hq, D]
    return out, None


def use_ember_attention(model: PreTrainedModel) -> None:
    """Route the model's attention through ``torch.ops.ember.attend_cache``."""
    assert ember_ops.attend_cache is not None  # the import above registered the op
    if ATTN_IMPLEMENTATION not in AttentionInterface():
        AttentionInterface.register(ATTN_IMPLEMENTATION, _ember_attention)
    model.set_attn_implementation(ATTN_IMPLEMENTATION)


class _EmberCacheLayer(CacheLayerMixin):
    """One layer of ember's static cache seen through transformers' cache protocol."""

    is_compileable = True
    is_sliding = False

    def __init__(self, cache: StaticKVCache, layer: int, positions: torch.Tensor) -> None:
        super().__init__()
        self._cache = cache
        self._layer = layer
        self._positions = positions  # int64 [T]: absolute positions of this step's tokens
        self.keys = cache.keys(layer)
        self.values = cache.values(layer)
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass  # the buffers exist up front

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self._cache.write(self._layer, self._positions, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._cache.geometry.max_context_len, 0

    def get_seq_length(self) -> int:
        return 0  # never used: positions are always passed explicitly

    def get_max_length(self) -> int:
        return self._cache.geometry.max_context_len


def make_hf_cache(cache: StaticKVCache, positions: torch.Tensor) -> Cache:
    """A transformers ``Cache`` writing into ``cache`` at ``positions`` (int64 [T]) for one step."""
    layers = [_EmberCacheLayer(cache, layer, positions) for layer in range(cache.geometry.n_layers)]
    return Cache(layers=layers)


def text_config(config: PretrainedConfig) -> PretrainedConfig:
    return config.get_text_config()


def rope_theta(config: PretrainedConfig) -> float | None:
    """RoPE base frequency: ``rope_parameters['rope_theta']`` (transformers >= 4.56; per layer type for
    gemma3, where the full-attention layers' value is reported), else the older ``rope_theta``."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict):
        if "rope_theta" in params:
            return float(params["rope_theta"])
        per_type = {k: v for k, v in params.items() if isinstance(v, dict) and "rope_theta" in v}
        if per_type:
            chosen = per_type.get("full_attention") or next(iter(per_type.values()))
            return float(chosen["rope_theta"])
    legacy = getattr(config, "rope_theta", None)
    return float(legacy) if legacy is not None else None


def cache_geometry(config: PretrainedConfig, max_context_len: int) -> CacheGeometry:
    cfg = text_config(config)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    n_kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return CacheGeometry(
        n_layers=cfg.num_hidden_layers,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        max_context_len=max_context_len,
    )


def causal_lm_logits(
    model: PreTrainedModel,
    tokens: torch.Tensor,  # int64 [1, T]
    positions: torch.Tensor,  # int64 [T]
    input_pos: torch.Tensor,  # int64 [1]
    cache: StaticKVCache,
    last_only: bool,
    layers: tuple[LayerAttention, ...] | None = None,
) -> torch.Tensor:
    """Run the HF causal LM on one step; returns logits [1, T or 1, vocab]."""
    out = model(
        input_ids=tokens,
        position_ids=positions.unsqueeze(0),  # [1, T]
        past_key_values=make_hf_cache(cache, positions),
        use_cache=True,
        logits_to_keep=1 if last_only else 0,
        return_dict=True,
        **{INPUT_POS_KWARG: input_pos, LAYERS_KWARG: layers, CACHE_KWARG: cache},
    )
    return out.logits


def tokenizer_special_flags(tokenizer: Any) -> tuple[bool | None, bool]:
    """(add_bos_token, add_eos_token) of an HF tokenizer: only some tokenizer classes define them
    (None / False when absent)."""
    return getattr(tokenizer, "add_bos_token", None), bool(getattr(tokenizer, "add_eos_token", False))
