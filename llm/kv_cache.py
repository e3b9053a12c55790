"""The static KV cache of an exported LLM: one pair of mutable buffers per layer.

The buffers are registered on the exported module itself as ``k_cache_{layer}`` /
``v_cache_{layer}`` so their names in the ExportedProgram are exactly those.
torch.export turns ``buffer.index_copy_(2, positions, k)`` into a functional
``index_copy`` plus an entry in ``graph_signature.buffers_to_mutate``; ember's memory
planner then writes the buffer in place, so no step copies the cache.

The cache stores fp32, fp16 (or the model's dtype) as it is, or int8 codes with one fp32 scale
per token and head (``ember::quantize_kv``) in ``k_scale_{layer}`` / ``v_scale_{layer}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from . import ops  # noqa: F401  registers torch.ops.ember.quantize_kv

__all__ = ["CacheGeometry", "StaticKVCache"]


@dataclass(frozen=True)
class CacheGeometry:
    """Shape of the cache: ``n_layers`` pairs of [1, n_kv_heads, max_context_len, head_dim]."""

    n_layers: int
    n_kv_heads: int
    head_dim: int
    max_context_len: int

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_kv_heads", "head_dim", "max_context_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"CacheGeometry.{name} must be a positive int, got {value!r}")

    @property
    def layer_shape(self) -> tuple[int, int, int, int]:
        return (1, self.n_kv_heads, self.max_context_len, self.head_dim)


class StaticKVCache:
    """Owns no tensors itself: registers and addresses the cache buffers of ``owner``.

    dtype: what the cache stores: a float dtype, or ``torch.int8`` for int8 codes with per-token,
    per-head fp32 scales (``quantized``)."""

    def __init__(self, owner: nn.Module, geometry: CacheGeometry, dtype: torch.dtype) -> None:
        self.owner = owner
        self.geometry = geometry
        self.dtype = dtype
        self.quantized = dtype == torch.int8
        if not (dtype.is_floating_point or self.quantized):
            raise ValueError(f"the KV cache stores a float dtype or int8, got {dtype}")
        scale_shape = (*geometry.layer_shape[:3], 1)  # [1, Hkv, S, 1]
        for layer in range(geometry.n_layers):
            # [1, Hkv, S, D] zeros; not persistent: the cache is run-time state, not a weight.
            owner.register_buffer(self.key_name(layer), torch.zeros(geometry.layer_shape, dtype=dtype), persistent=False)
            owner.register_buffer(self.value_name(layer), torch.zeros(geometry.layer_shape, dtype=dtype), persistent=False)
            if self.quantized:
                owner.register_buffer(self.key_scale_name(layer), torch.zeros(scale_shape), persistent=False)
                owner.register_buffer(self.value_scale_name(layer), torch.zeros(scale_shape), persistent=False)

    @staticmethod
    def key_name(layer: int) -> str:
        return f"k_cache_{layer}"

    @staticmethod
    def value_name(layer: int) -> str:
        return f"v_cache_{layer}"

    @staticmethod
    def key_scale_name(layer: int) -> str:
        return f"k_scale_{layer}"

    @staticmethod
    def value_scale_name(layer: int) -> str:
        return f"v_scale_{layer}"

    def scales(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The int8 cache's (key, value) scales, fp32 [1, Hkv, S, 1] each."""
        if not self.quantized:
            raise ValueError(f"a {self.dtype} KV cache has no scales")
        return self.owner.get_buffer(self.key_scale_name(layer)), self.owner.get_buffer(self.value_scale_name(layer))

    def keys(self, layer: int) -> torch.Tensor:
        return self.owner.get_buffer(self.key_name(layer))  # [1, Hkv, S, D]

    def values(self, layer: int) -> torch.Tensor:
        return self.owner.get_buffer(self.value_name(layer))  # [1, Hkv, S, D]

    def write(
        self, layer: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v ([1, Hkv, T, D]) at ``positions`` (int64 [T]); returns the layer's whole cache pair
        (int8 codes for a quantized cache: its scales are ``scales(layer)``)."""
        k_cache = self.keys(layer)
        v_cache = self.values(layer)
        if self.quantized:
            k_scale, v_scale = self.scales(layer)
            k_codes, k_scales = torch.ops.ember.quantize_kv(k)  # int8 [1, Hkv, T, D], fp32 [1, Hkv, T, 1]
            v_codes, v_scales = torch.ops.ember.quantize_kv(v)
            k_cache.index_copy_(2, positions, k_codes)
            v_cache.index_copy_(2, positions, v_codes)
            k_scale.index_copy_(2, positions, k_scales)
            v_scale.index_copy_(2, positions, v_scales)
        else:
            k_cache.index_copy_(2, positions, k.to(self.dtype))
            v_cache.index_copy_(2, positions, v.to(self.dtype))
        return k_cache, v_cache

    def reset(self) -> None:
        for layer in range(self.geometry.n_layers):
            self.keys(layer).zero_()
            self.values(layer).zero_()
            if self.quantized:
                for scale in self.scales(layer):
                    scale.zero_()
