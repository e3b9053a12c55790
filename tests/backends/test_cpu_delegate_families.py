"""Every tiny family, quantized and exported once, lowered twice: with the CPU delegate and with the
portable kernels only. 32 greedy steps give the same tokens; logits agree closely (the delegate sums
in another order, which for dynamic int8 activations can move one activation across a rounding
boundary, so those get the same 5e-2 as the quantized-export test)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import ember.runtime
from ember.backends.cpu import CpuPartitioner
from ember.export import lower
from ember.llm.config import ExportConfig
from ember.llm.exportable import ExportableLLM
from ember.quant.apply import quantize_model
from ember.quant.recipe import PER_CHANNEL, Mapping, QuantRecipe, ScaleDType, Scheme, WeightQuant
from tests.llm.tiny_models import MAX_CONTEXT_LEN, MAX_SEQ_LEN, TINY_CONFIGS, assert_traces_match, clone_model, \
    make_tiny_model, step_greedy

STEPS = 32
RECIPES = {
    # int8 activations x int4 weights, int8 tied table (the 8da4w preset's shape)
    "8da4w": QuantRecipe(linear=WeightQuant(Scheme.DA8W4, 32), embedding=WeightQuant(Scheme.W8, 32)),
    # fp32 activations x int4 weights with float offsets (the q4 preset's / GGUF Q4_1's shape), per-channel table
    "4w_float_offset": QuantRecipe(linear=WeightQuant(Scheme.W4, 32, Mapping.FLOAT_OFFSET, scale_dtype=ScaleDType.FLOAT16),
                                   embedding=WeightQuant(Scheme.W8, PER_CHANNEL)),
}


def _run(program, path: Path, prompt: list[int]):
    program.save(path)
    prog = ember.runtime.load(path)

    def step(tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        (logits,) = prog.run("forward", tokens, pos)
        return torch.from_numpy(logits)

    return step_greedy(step, prompt, STEPS, MAX_SEQ_LEN)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("case", sorted(TINY_CONFIGS))
def test_delegate_file_matches_portable_file(case: str, recipe: str, tmp_path: Path) -> None:
    model, config = make_tiny_model(case)
    quantize_model(model, RECIPES[recipe])
    wrapper = ExportableLLM(clone_model(model), ExportConfig(max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN))
    ep = wrapper.export(functionalize=False)  # lower() functionalizes it
    portable = lower(ep)
    delegated = lower(ep, partitioners=(CpuPartitioner(),))
    stats = delegated.method_stats("forward")
    assert stats["delegated_nodes"].get("ember.cpu", 0) > 0, stats
    assert "ember::quantized_linear.default" not in stats["ops"], "every quantized linear should be delegated"
    prompt = torch.randint(3, config.vocab_size, (7,), generator=torch.Generator().manual_seed(7)).tolist()
    expected = _run(portable, tmp_path / "portable.ember", prompt)
    actual = _run(delegated, tmp_path / "cpu.ember", prompt)
    dynamic = RECIPES[recipe].linear.scheme.dynamic_activations
    assert_traces_match(actual, expected, rtol=5e-2 if dynamic else 1e-4)
