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


CASES = ["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3_text"]


def _eager_step(wrapper) -> None:
    import torch

    with torch.no_grad():
        wrapper(torch.tensor([[1, 2, 3]]), torch.tensor([0]))


@pytest.mark.parametrize("case", CASES)
def test_layer_quirks_are_what_transformers_does(case) -> None:
    """Each layer's (sliding window, softcap) from the adapter is checked by ember's attention hook
    against what transformers' modeling code passes for that layer: the forward runs only if the
    adapter describes the model as transformers runs it. A quirk changed on purpose must be caught,
    which proves the check is live."""
    import dataclasses

    from ember.llm.adapters import LayerAttention
    from ember.llm.config import ExportConfig
    from ember.llm.exportable import ExportableLLM

    from .tiny_models import make_tiny_model

    model, _ = make_tiny_model(case)
    wrapper = ExportableLLM(model, ExportConfig(max_context_len=16, max_seq_len=4))
    _eager_step(wrapper)  # raises if any layer disagrees
    layers = wrapper.quirks.layers
    assert len(layers) == model.config.num_hidden_layers
    for layer, wrong in ((0, LayerAttention(layers[0].sliding_window + 3, layers[0].softcap)),
                         (len(layers) - 1, LayerAttention(layers[-1].sliding_window, layers[-1].softcap + 1.5))):
        changed = list(layers)
        changed[layer] = wrong
        wrapper.quirks = dataclasses.replace(wrapper.quirks, layers=tuple(changed))
        with pytest.raises(RuntimeError, match=f"layer {layer}: transformers attends with"):
            _eager_step(wrapper)


def test_sliding_window_layers_follow_layer_types() -> None:
    config = make_tiny_config("gemma2")
    config.layer_types = ["full_attention", "sliding_attention"]
    assert get_adapter("gemma2").quirks(config).sliding_windows == [0, SLIDING_WINDOW]
    config.layer_types = ["sliding_attention", "sliding_attention"]
    assert get_adapter("gemma2").quirks(config).sliding_windows == [SLIDING_WINDOW, SLIDING_WINDOW]
    config.layer_types = ["chunked_attention", "full_attention"]
    with pytest.raises(UnsupportedModelError, match="layer 0 has type 'chunked_attention'"):
        get_adapter("gemma2").quirks(config)


def test_llama3_rope_is_accepted_and_dynamic_rope_rejected() -> None:
    config = make_tiny_config("llama3_rope")
    adapter = get_adapter("llama")
    adapter.check(config)
    assert adapter.quirks(config).rope_type == "llama3"
    config.rope_parameters = {**config.rope_parameters, "rope_type": "dynamic"}
    with pytest.raises(UnsupportedModelError, match="'dynamic' is not supported"):
        adapter.check(config)
