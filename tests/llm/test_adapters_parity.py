"""Every adapter: ember's exportable wrapper (eager and torch.export'ed) == HF eager, greedy."""

from __future__ import annotations

import pytest
import torch

from ember.llm.config import ExportConfig
from ember.llm.exportable import ExportableLLM

from .tiny_models import (
    MAX_CONTEXT_LEN,
    MAX_SEQ_LEN,
    TINY_CONFIGS,
    assert_traces_match,
    clone_model,
    make_tiny_model,
    reference_greedy,
    step_greedy,
)

STEPS = 32
CASES = sorted(TINY_CONFIGS)


def _prompts(vocab: int) -> dict[str, list[int]]:
    g = torch.Generator().manual_seed(123)
    return {
        "short": torch.randint(3, vocab, (5,), generator=g).tolist(),
        "max_seq_len": torch.randint(3, vocab, (MAX_SEQ_LEN,), generator=g).tolist(),
    }


def _wrapper(model) -> ExportableLLM:
    return ExportableLLM(clone_model(model), ExportConfig(max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN))


@pytest.mark.parametrize("case", CASES)
def test_eager_wrapper_matches_hf(case: str) -> None:
    model, config = make_tiny_model(case)
    wrapper = _wrapper(model)
    for name, prompt in _prompts(config.vocab_size).items():
        expected = reference_greedy(model, prompt, STEPS)
        wrapper.reset_cache()
        actual = step_greedy(wrapper, prompt, STEPS, MAX_SEQ_LEN)
        assert_traces_match(actual, expected)


@pytest.mark.parametrize("case", CASES)
def test_exported_module_matches_hf(case: str) -> None:
    model, config = make_tiny_model(case)
    wrapper = _wrapper(model)
    program = wrapper.export()
    mutated = set(program.graph_signature.buffers_to_mutate.values())
    n_layers = config.num_hidden_layers
    assert mutated >= {f"k_cache_{i}" for i in range(n_layers)} | {f"v_cache_{i}" for i in range(n_layers)}
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert targets.count("ember.attend_cache.default") == n_layers
    assert not any("index_copy_" in t for t in targets), "cache writes must be functional after export"

    module = program.module()
    for name, prompt in _prompts(config.vocab_size).items():
        expected = reference_greedy(model, prompt, STEPS)
        for buffer_name, buffer in module.named_buffers():
            if "_cache_" in buffer_name:
                buffer.zero_()
        actual = step_greedy(module, prompt, STEPS, MAX_SEQ_LEN)
        assert_traces_match(actual, expected)
