"""``--qactivations int8``: weight-only linears with dynamic int8 activations per group (llama.cpp's
Q8_0 activations, ``ActQuant.INT8_SYM_PER_GROUP``).

The reference semantics (export/quant_ops.py) against a float64 re-derivation, ties and edge
groups; the kernels against the reference live in tests/runtime/test_quantized_kernels.py and
tests/backends/test_cpu_delegate.py (they cycle act_quant 0, 1 and 2). Here: the flag's checks and
tiny families exported with it, whose delegate file decodes like the eager model.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

import ember.runtime
from ember.backends.cpu import CpuPartitioner
from ember.export import lower
from ember.export.quant_ops import ActQuant, quantize_activation_per_group
from ember.llm.config import ExportConfig
from ember.llm.exportable import ExportableLLM
from ember.quant.activations import apply_linear_activations
from ember.quant.apply import quantize_model
from ember.quant.canonical_modules import to_canonical_modules
from ember.quant.cli_args import add_quant_arguments, recipe_from_args
from ember.quant.modules import QuantizedLinear
from ember.quant.recipe import LinearActivations, Mapping, QuantRecipe, ScaleDType, Scheme, WeightQuant
from tests.llm.tiny_models import MAX_CONTEXT_LEN, MAX_SEQ_LEN, assert_traces_match, make_tiny_model, step_greedy


def _reference_f64(x: torch.Tensor, gs: int) -> torch.Tensor:
    """The same scheme derived independently (float64 division of fp32 values, then half-even)."""
    xs = x.double().reshape(*x.shape[:-1], -1, gs)
    d = (xs.abs().amax(-1, keepdim=True).float() / 127.0).double()  # d itself is an fp32 value
    q = torch.where(d > 0, torch.round((xs / d).float().double()), torch.zeros_like(xs)).clamp(-127, 127)
    return (q * d).float().reshape(x.shape)


@pytest.mark.parametrize("gs", [4, 32, 96])
def test_per_group_quantization_matches_its_definition(gs):
    gen = torch.Generator().manual_seed(gs)
    x = torch.randn(3, 5, 96, generator=gen) * torch.logspace(-3, 3, 96)  # groups of very different ranges
    got = quantize_activation_per_group(x, gs)
    assert torch.equal(got, _reference_f64(x, gs))
    # each group keeps its largest magnitude exactly (code +-127) and every value within d / 2
    xs, gs_ = x.reshape(3, 5, -1, gs), got.reshape(3, 5, -1, gs)
    d = xs.abs().amax(-1, keepdim=True) / 127
    assert torch.all((xs - gs_).abs() <= d / 2 * (1 + 1e-5))


def test_per_group_quantization_edges():
    x = torch.zeros(4, 8)
    x[1] = torch.tensor([127.0, 0.5, 1.5, -0.5, -1.5, 2.5, 63.5, -127.0])  # d = 1: exact .5 ties, half to even
    x[2, :4] = float("nan")  # a NaN poisons its group only
    x[2, 4:] = 1.0
    x[3, 0] = float("inf")
    got = quantize_activation_per_group(x, 4)
    assert torch.equal(got[0], torch.zeros(8))  # an all-zero group: d = 0, codes 0, no division by zero
    assert got[1].tolist() == [127.0, 0.0, 2.0, -0.0, -2.0, 2.0, 64.0, -127.0]
    assert torch.isnan(got[2, :4]).all() and torch.equal(got[2, 4:], torch.ones(4))
    assert torch.isnan(got[3, :4]).all()
    with pytest.raises(ValueError, match="group_size 5 does not divide the row length 8"):
        quantize_activation_per_group(x, 5)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_quant_arguments(parser)
    return parser.parse_args(list(argv))


def test_flag_needs_a_quantization_and_a_known_value(capsys):
    with pytest.raises(ValueError, match="--qactivations int8 applies to quantized linears; add a quantization"):
        recipe_from_args(_args("--qactivations", "int8"))
    assert recipe_from_args(_args("--quant", "gguf", "--qactivations", "int8")) == "gguf"
    with pytest.raises(SystemExit):
        _args("--qactivations", "int4")
    assert "invalid choice: 'int4'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"activations 'fp8' is not supported; use one of \['float', 'int8'\]"):
        LinearActivations.parse("fp8")


def test_export_llm_refuses_int8_activations_without_quantization(tmp_path):
    from ember.llm.exporter import export_llm

    with pytest.raises(ValueError, match="qactivations='int8' applies to quantized linears"):
        export_llm(tmp_path / "missing", tmp_path / "x.ember", qactivations="int8")


# The q4 preset's linears (4-bit float offsets, fp16) and an 8-bit per-group tied table as lm_head.
RECIPE = QuantRecipe(linear=WeightQuant(Scheme.W4, 32, Mapping.FLOAT_OFFSET, scale_dtype=ScaleDType.FLOAT16),
                     embedding=WeightQuant(Scheme.W8, 32, scale_dtype=ScaleDType.FLOAT16))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["llama", "qwen3", "gemma2"])
def test_int8_activation_files_decode_like_the_eager_model(case: str, tmp_path: Path) -> None:
    model, config = make_tiny_model(case)
    quantize_model(model, RECIPE)
    to_canonical_modules(model)
    linears = [m for m in model.modules() if isinstance(m, QuantizedLinear)]
    assert apply_linear_activations(model, LinearActivations.INT8) == len(linears) > 0
    assert {m.act_quant for m in linears} == {ActQuant.INT8_SYM_PER_GROUP}
    wrapper = ExportableLLM(model, ExportConfig(max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN))
    prompt = torch.randint(3, config.vocab_size, (7,), generator=torch.Generator().manual_seed(7)).tolist()
    with torch.no_grad():
        wrapper.reset_cache()
        expected = step_greedy(lambda t, p: wrapper(t, p), prompt, 32, MAX_SEQ_LEN)
    program = lower(wrapper.export(functionalize=False), partitioners=(CpuPartitioner(),))
    assert "ember::quantized_linear.default" not in program.method_stats("forward")["ops"], "all delegated"
    path = tmp_path / f"{case}.ember"
    program.save(path)
    prog = ember.runtime.load(path)
    actual = step_greedy(lambda t, p: torch.from_numpy(prog.run("forward", t, p)[0]), prompt, 32, MAX_SEQ_LEN)
    # The eager model quantizes the same activations; the delegate sums in another order, which can
    # move one activation across a rounding boundary (as for the 8da recipes).
    assert_traces_match(actual, expected, rtol=5e-2)
