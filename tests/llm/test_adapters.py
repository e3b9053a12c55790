"""Adapter registry and the quirks each family declares."""

from __future__ import annotations

import pytest

from ember.llm.adapters import UnsupportedModelError, get_adapter, supported_model_types

from .tiny_models import SLIDING_WINDOW, make_tiny_config

FAMILIES = ["gemma2", "gemma3_text", "llama", "mistral", "phi3", "qwen2", "qwen3"]


def test_registry_lists_every_family() -> None:
    assert supported_model_types() == sorted(FAMILIES)


def test_unsupported_model_type_names_the_supported_ones() -> None:
    with pytest.raises(UnsupportedModelError, match="'gpt2' is not supported.*gemma2, gemma3_text, llama"):
        get_adapter("gpt2")


@pytest.mark.parametrize(
    "case,windows,softcap,qk_norm,embed_scale,final_cap",
    [
        ("llama", [0, 0], 0.0, False, 1.0, 0.0),
        ("qwen2", [0, SLIDING_WINDOW], 0.0, False, 1.0, 0.0),
        ("qwen3", [0, SLIDING_WINDOW], 0.0, True, 1.0, 0.0),
        ("mistral", [SLIDING_WINDOW, SLIDING_WINDOW], 0.0, False, 1.0, 0.0),
        ("phi3", [SLIDING_WINDOW, SLIDING_WINDOW], 0.0, False, 1.0, 0.0),
        ("gemma2", [SLIDING_WINDOW, 0], 5.0, False, 8.0, 3.0),
        ("gemma3_text", [SLIDING_WINDOW, 0], 0.0, True, 8.0, 3.0),
    ],
)
def test_quirks(case, windows, softcap, qk_norm, embed_scale, final_cap) -> None:
    config = make_tiny_config(case)
    quirks = get_adapter(config.model_type).quirks(config)
    assert quirks.sliding_windows == windows
    assert {layer.softcap for layer in quirks.layers} == {softcap}
    assert quirks.qk_norm is qk_norm
    assert quirks.embedding_scale == pytest.approx(embed_scale)
    assert quirks.final_logit_softcap == final_cap


def test_llama3_rope_is_accepted_and_dynamic_rope_rejected() -> None:
    config = make_tiny_config("llama3_rope")
    adapter = get_adapter("llama")
    adapter.check(config)
    assert adapter.quirks(config).rope_type == "llama3"
    config.rope_parameters = {**config.rope_parameters, "rope_type": "dynamic"}
    with pytest.raises(UnsupportedModelError, match="'dynamic' is not supported"):
        adapter.check(config)
