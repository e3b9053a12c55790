"""Family adapters: what ember must know about a model family beyond HF's modeling code.

Adapters are registered by HF ``model_type`` with ``@register_adapter``. They read the
config into a typed ``ModelQuirks`` (validated), reject configurations ember cannot
export, and describe each layer's attention so the export can check that what HF
passes to the attention function is what the family is known to do.

Pure Python (no torch): configs are read through attribute access only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "LayerAttention",
    "ModelQuirks",
    "FamilyAdapter",
    "register_adapter",
    "get_adapter",
    "supported_model_types",
    "UnsupportedModelError",
]


class UnsupportedModelError(ValueError):
    """The checkpoint's family or one of its settings cannot be exported by ember."""


@dataclass(frozen=True)
class LayerAttention:
    """How one layer attends: ``sliding_window`` 0 = full causal; ``softcap`` 0.0 = no capping."""

    sliding_window: int = 0
    softcap: float = 0.0

    def __post_init__(self) -> None:
        if self.sliding_window < 0:
            raise ValueError(f"LayerAttention.sliding_window must be >= 0 (0 = none), got {self.sliding_window}")
        if self.softcap < 0:
            raise ValueError(f"LayerAttention.softcap must be >= 0 (0 = none), got {self.softcap}")


@dataclass(frozen=True)
class ModelQuirks:
    """Family-specific behaviour ember itself acts on. HF's modeling code implements everything
    else (embedding scale, QK-norm, final-logit capping, ...) and the exported graph carries it,
    so only what ember reads is recorded: each layer's attention (checked against what HF passes
    to the attention function at export, and the window written to ``llm.sliding_windows``) and
    the RoPE type (``llm.rope_type``)."""

    layers: tuple[LayerAttention, ...]
    rope_type: str = "default"

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError("ModelQuirks.layers is empty: the config declares no layers")

    @property
    def sliding_windows(self) -> list[int]:
        return [layer.sliding_window for layer in self.layers]


class FamilyAdapter:
    """Base adapter. Subclasses set ``model_type`` and override ``quirks``."""

    model_type: ClassVar[str] = ""
    # RoPE types whose frequencies do not depend on the data (or only through torch.where).
    supported_rope_types: ClassVar[frozenset[str]] = frozenset({"default", "linear", "llama3", "yarn"})

    def quirks(self, config: Any) -> ModelQuirks:
        raise NotImplementedError

    def check(self, config: Any) -> None:
        """Raise UnsupportedModelError for settings this family's export cannot handle."""
        rope_type = rope_type_of(config)
        if rope_type not in self.supported_rope_types:
            raise UnsupportedModelError(
                f"{self.model_type}: rope type {rope_type!r} is not supported for export "
                f"(supported: {sorted(self.supported_rope_types)}); its frequencies change with the "
                "sequence length at run time"
            )

    # Helpers shared by the family files -------------------------------------------------

    @staticmethod
    def full_layers(config: Any, softcap: float = 0.0) -> tuple[LayerAttention, ...]:
        return tuple(LayerAttention(0, softcap) for _ in range(config.num_hidden_layers))

    @staticmethod
    def typed_layers(config: Any, softcap: float = 0.0) -> tuple[LayerAttention, ...]:
        """Layers from ``config.layer_types`` ('sliding_attention' uses ``config.sliding_window``)."""
        window = int(config.sliding_window or 0)
        layers = []
        for index, kind in enumerate(config.layer_types):
            if kind == "sliding_attention":
                layers.append(LayerAttention(window, softcap))
            elif kind == "full_attention":
                layers.append(LayerAttention(0, softcap))
            else:
                raise UnsupportedModelError(
                    f"layer {index} has type {kind!r}; ember exports only 'full_attention' and "
                    "'sliding_attention' layers"
                )
        return tuple(layers)


def rope_type_of(config: Any) -> str:
    params = getattr(config, "rope_parameters", None) or {}
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        # Per layer type (gemma3): every entry must be supported; report the first non-default.
        types = {v.get("rope_type", "default") for v in params.values()}
        non_default = sorted(types - {"default"})
        return non_default[0] if non_default else "default"
    return params.get("rope_type", "default") if isinstance(params, dict) else "default"


_REGISTRY: dict[str, FamilyAdapter] = {}


def register_adapter(cls: type[FamilyAdapter]) -> type[FamilyAdapter]:
    """Class decorator: register one instance of ``cls`` under ``cls.model_type``."""
    if not cls.model_type:
        raise ValueError(f"{cls.__name__} must set model_type before registering")
    if cls.model_type in _REGISTRY:
        raise ValueError(f"model_type {cls.model_type!r} is already registered by {type(_REGISTRY[cls.model_type]).__name__}")
    _REGISTRY[cls.model_type] = cls()
    return cls


def supported_model_types() -> list[str]:
    from . import load_all

    load_all()
    return sorted(_REGISTRY)


def get_adapter(model_type: str) -> FamilyAdapter:
    from . import load_all

    load_all()
    adapter = _REGISTRY.get(model_type)
    if adapter is None:
        raise UnsupportedModelError(
            f"model_type {model_type!r} is not supported by ember; supported: {', '.join(sorted(_REGISTRY))}. "
            "Add an adapter in llm/adapters/<family>.py to support it"
        )
    return adapter
