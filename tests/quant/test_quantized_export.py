"""Every family x every recipe through the whole stack, as ``export_llm`` runs it: torchao
quantize_ -> canonical ember modules over torchao's values -> torch.export -> passes -> .ember
file -> C++ runtime == the torchao-quantized eager model.

32 greedy steps after a prompt: identical tokens, logits within 1e-3 of the largest, against the
eager model decoded with transformers' own KV cache (the runtime's evaluation order); with dynamic
int8 activations, within 5e-2, past 1e-3 only after at most MAX_FLIP_STEPS rounding flips (below). Against a full
recompute at every step (no cache) the tokens must match too, and the logits of weight-only recipes
stay within 1e-3; dynamic int8 activations may differ there by a whole quantization step (see
``reference_greedy_cached``: measured on gemma2 8da4w, one attention output of layer 0 at 74.50001
vs 74.50000763 quantization steps rounds to 75 vs 74 at step 5, and the cache keeps that K/V), so
those get 5e-2. torchao's eager model disagrees with itself the same way: its cached and
full-recompute decodes of these prompts are more than 1e-3 apart at 26 of 32 steps (gemma2 8da4w),
20 (gemma3 8da4w) and 1 (gemma3 and qwen2 8da8w), so no implementation can stay within 1e-3 of
both at every step. Which side of that tie a run lands on depends on fp32 rounding that differs from
machine to machine (on an Intel Xeon both eager decodes agree, and ember's SIMD kernels round the
other way, 1.3e-2 at step 5 and up to 1.4e-2 after it, while its portable kernels match to 4e-7), and
a flipped K/V stays in the cache for every later step. So the dynamic recipes count flips, not
steps: at most MAX_FLIP_STEPS steps may newly exceed 1e-3 (the previous step within it), and every
step stays within 5e-2. The tied families (llama, gemma2, gemma3) also check that the lm_head reads the
embedding's table, which the file stores once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import ember.runtime
from ember.export import lower
from ember.export.program import Program
from ember.llm.config import ExportConfig
from ember.llm.exportable import ExportableLLM
from ember.quant.apply import quantize_model
from ember.quant.canonical_modules import to_canonical_modules
from ember.quant.recipe import PER_CHANNEL, Mapping, QuantRecipe, ScaleDType, Scheme, WeightQuant

from tests.llm.tiny_models import (
    MAX_CONTEXT_LEN,
    MAX_SEQ_LEN,
    TINY_CONFIGS,
    assert_traces_match,
    clone_model,
    make_tiny_model,
    reference_greedy,
    reference_greedy_cached,
    step_greedy,
)

STEPS = 32

RECIPES = {
    "8w": QuantRecipe(linear=WeightQuant(Scheme.W8, PER_CHANNEL), embedding=WeightQuant(Scheme.W8, PER_CHANNEL)),
    "8da4w_g32": QuantRecipe(linear=WeightQuant(Scheme.DA8W4, 32), embedding=WeightQuant(Scheme.W4, 32)),
    "4w_g32_asym": QuantRecipe(linear=WeightQuant(Scheme.W4, 32, Mapping.ASYMMETRIC, scale_dtype=ScaleDType.FLOAT16),
                               embedding=WeightQuant(Scheme.W8, 32)),
    "8da8w": QuantRecipe(linear=WeightQuant(Scheme.DA8W8, 64), embedding=WeightQuant(Scheme.W4, 64, Mapping.ASYMMETRIC)),
    "4w_float_offset": QuantRecipe(linear=WeightQuant(Scheme.W4, 32, Mapping.FLOAT_OFFSET, scale_dtype=ScaleDType.FLOAT16),
                                   embedding=WeightQuant(Scheme.W8, PER_CHANNEL)),
}
MAX_FLIP_STEPS = 3  # of STEPS: steps at which a dynamic-activation rounding flip may newly move past 1e-3


def _steps_over(actual, expected, rtol: float) -> list[int]:
    return [i for i, (got, want) in enumerate(zip(actual.logits, expected.logits))
            if float((got - want).abs().max()) > rtol * max(float(want.abs().max()), 1e-6)]


QUANT_OPS = {"ember::quantized_linear.default", "ember::quantized_embedding.default"}


def _export(case: str, recipe: QuantRecipe, tmp_path: Path):
    model, config = make_tiny_model(case)
    plan = quantize_model(model, recipe)  # `model` stays torchao's: the eager reference
    exported = clone_model(model)
    to_canonical_modules(exported)
    wrapper = ExportableLLM(exported, ExportConfig(max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN))
    program = lower(wrapper.export(functionalize=False), metadata={"llm.family": config.model_type})
    path = tmp_path / f"{case}.ember"
    program.save(path)
    return path, program, model, config, plan


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("case", sorted(TINY_CONFIGS))
def test_quantized_runtime_matches_torchao_eager(case: str, recipe: str, tmp_path: Path) -> None:
    path, program, model, config, plan = _export(case, RECIPES[recipe], tmp_path)
    ops = program.method_stats("forward")["ops"]
    assert "aten::linear.default" not in ops, f"an unquantized linear is left: {ops}"
    assert QUANT_OPS <= set(ops), ops
    assert not any(op.startswith("torchao::") for op in ops), ops

    prog = ember.runtime.load(path)

    def step(tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        (logits,) = prog.run("forward", tokens, pos)
        return torch.from_numpy(logits)

    prompt = torch.randint(3, config.vocab_size, (7,), generator=torch.Generator().manual_seed(7)).tolist()
    actual = step_greedy(step, prompt, STEPS, MAX_SEQ_LEN)
    cached = reference_greedy_cached(model, prompt, STEPS, MAX_SEQ_LEN)
    dynamic = RECIPES[recipe].linear.scheme.dynamic_activations
    if dynamic:
        # ember's SIMD fp32 kernels round differently from PyTorch's by an ulp now and then (measured:
        # the AVX2 RMSNorm's FMA sum of squares flips one code at step 30 of llama3_rope 8da4w, 1.6e-3;
        # 4e-7 with EMBER_KERNEL_ISA=portable): a few steps may carry a flip, never a large error.
        assert_traces_match(actual, cached, rtol=5e-2)
        over = _steps_over(actual, cached, 1e-3)
        flips = [i for i in over if i - 1 not in over]  # a flip's K/V stays in the cache: count its onset
        assert len(flips) <= MAX_FLIP_STEPS, f"logits off by > 1e-3 at steps {over} (onsets {flips})"
    else:
        assert_traces_match(actual, cached, rtol=1e-3)
    # No cache: the same tokens; a dynamic-activation rounding flip (see the module docstring) may
    # move the logits by up to 2.2e-2 (gemma3 8da4w; HF's own cached decode differs from it as much).
    assert_traces_match(actual, reference_greedy(model, prompt, STEPS), rtol=5e-2 if dynamic else 1e-3)
    if plan.tied:
        assert plan.shares_table


def _segment_sizes(path: Path) -> list[int]:
    return [len(memoryview(s).cast("B")) for s in Program.load(str(path)).segments]


def test_tied_table_is_stored_once(tmp_path: Path) -> None:
    recipe = QuantRecipe(linear=WeightQuant(Scheme.W4, 32), embedding=WeightQuant(Scheme.W8, PER_CHANNEL))
    path, program, model, config, plan = _export("llama", recipe, tmp_path)
    assert plan.tied and plan.shares_table
    table = config.vocab_size * config.hidden_size  # int8 codes: one byte per weight
    assert _segment_sizes(path).count(table) == 1
    # Two ops read the table; the method's constant bytes count it once.
    assert program.method_stats("forward")["constants_bytes"] <= sum(_segment_sizes(path))
    # Untied: a different output scheme stores a second table.
    recipe = QuantRecipe(linear=WeightQuant(Scheme.W4, 32), embedding=WeightQuant(Scheme.W8, PER_CHANNEL),
                         output=WeightQuant(Scheme.W8, 32))
    path, _, _, _, plan = _export("llama", recipe, tmp_path)
    assert plan.tied and not plan.shares_table
    assert "stored twice" in plan.summary()
    assert _segment_sizes(path).count(table) == 2
