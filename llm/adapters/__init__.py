"""Family adapters, one file per HF ``model_type``, registered with ``@register_adapter``."""

from __future__ import annotations

import importlib

from .base import (
    FamilyAdapter,
    LayerAttention,
    ModelQuirks,
    UnsupportedModelError,
    get_adapter,
    register_adapter,
    supported_model_types,
)

__all__ = [
    "FamilyAdapter",
    "LayerAttention",
    "ModelQuirks",
    "UnsupportedModelError",
    "get_adapter",
    "register_adapter",
    "supported_model_types",
    "load_all",
]

# The family modules; importing one registers its adapter.
_FAMILY_MODULES = ("llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3")


def load_all() -> None:
    for name in _FAMILY_MODULES:
        importlib.import_module(f"{__name__}.{name}")
