"""Recipes: validation with clear errors, overrides, the CLI flags, per-layer size checks."""

from __future__ import annotations

import argparse

import pytest

from ember.quant.apply import plan_quantization
from ember.quant.cli_args import add_quant_arguments, recipe_from_args
from ember.quant.presets import GGUF, PRESETS, get_preset
from ember.quant.recipe import PER_CHANNEL, Mapping, Override, QuantRecipe, ScaleDType, Scheme, WeightQuant

from tests.llm.tiny_models import make_tiny_model


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_quant_arguments(parser)
    return parser.parse_args(list(argv))


def test_bad_recipes_name_the_value_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"scheme '3w' is not supported; use one of \['8w', '4w', '8da4w', '8da8w'\]"):
        WeightQuant("3w")
    with pytest.raises(ValueError, match=r"group size 48 is not supported; use one of \[16, 32, 64, 128, 256\]"):
        WeightQuant(Scheme.W4, 48)
    with pytest.raises(ValueError, match="hqq.*symmetric.*'asym'"):
        WeightQuant(Scheme.W4, 32, Mapping.ASYMMETRIC, algorithm="hqq")
    with pytest.raises(ValueError, match="embedding is a table lookup.*'8da4w'"):
        QuantRecipe(embedding=WeightQuant(Scheme.DA8W4))
    with pytest.raises(ValueError, match="quantizes nothing"):
        QuantRecipe()
    with pytest.raises(ValueError, match="preset 'q5' is unknown"):
        get_preset("q5")


def test_output_follows_the_embedding_when_tied_and_overrides_win() -> None:
    recipe = QuantRecipe(linear=WeightQuant(Scheme.DA8W4), embedding=WeightQuant(Scheme.W8, PER_CHANNEL),
                         overrides=(Override("*.down_proj", WeightQuant(Scheme.W8)), Override("lm_head", None)))
    assert recipe.for_linear("lm_head", is_output=True, tied=False) is None  # the override keeps it float
    plain = QuantRecipe(linear=WeightQuant(Scheme.DA8W4), embedding=WeightQuant(Scheme.W8, PER_CHANNEL))
    assert plain.for_linear("lm_head", is_output=True, tied=True) == WeightQuant(Scheme.W8, PER_CHANNEL)
    assert plain.for_linear("lm_head", is_output=True, tied=False) == WeightQuant(Scheme.DA8W4)
    assert recipe.for_linear("model.layers.0.mlp.down_proj", is_output=False, tied=True).scheme is Scheme.W8
    assert QuantRecipe.from_json(recipe.to_json()) == recipe


def test_cli_flags_build_and_refine_recipes() -> None:
    assert recipe_from_args(_args()) is None
    assert recipe_from_args(_args("--quant", "q4")) == PRESETS["q4"]
    assert recipe_from_args(_args("--quant", "gguf")) == GGUF
    r = recipe_from_args(_args("--qlinear", "8da4w", "--qlinear-group-size", "32", "--qembedding", "8w"))
    assert r.linear == WeightQuant(Scheme.DA8W4, 32)
    assert r.embedding == WeightQuant(Scheme.W8, 32, scale_dtype=ScaleDType.FLOAT16)  # the Q8_0 grid by default
    r = recipe_from_args(_args("--qembedding", "4w", "--qembedding-group-size", "0", "--qscale-dtype", "bfloat16"))
    assert r.linear is None and r.embedding == WeightQuant(Scheme.W4, PER_CHANNEL, scale_dtype=ScaleDType.BFLOAT16)
    r = recipe_from_args(_args("--quant", "q4", "--qlinear-group-size", "64", "--qoverride", "*.down_proj=8w:0"))
    assert r.linear.group_size == 64 and r.linear.mapping is Mapping.FLOAT_OFFSET and r.name == "q4+custom"
    assert r.overrides[-1].quant.scheme is Scheme.W8 and r.overrides[-1].quant.group_size == PER_CHANNEL
    with pytest.raises(ValueError, match="cannot be combined"):
        recipe_from_args(_args("--quant", "gguf", "--qlinear", "4w"))
    with pytest.raises(ValueError, match="need --qlinear"):
        recipe_from_args(_args("--qlinear-group-size", "32"))
    with pytest.raises(ValueError, match="PATTERN=SCHEME"):
        recipe_from_args(_args("--qlinear", "4w", "--qoverride", "nonsense"))
    with pytest.raises(ValueError, match="scheme '5w' is not supported"):
        recipe_from_args(_args("--qlinear", "4w", "--qoverride", "lm_head=5w"))


def test_plan_names_a_layer_the_group_size_does_not_divide() -> None:
    model, _ = make_tiny_model("llama")  # hidden 64, intermediate 128
    plan = plan_quantization(model, QuantRecipe(linear=WeightQuant(Scheme.W4, 32), embedding=WeightQuant(Scheme.W8)))
    assert plan.tied and plan.shares_table
    assert {w.kind for w in plan.weights} == {"linear", "output", "embedding"}
    with pytest.raises(ValueError, match=r"layer 'model.layers.0.self_attn.q_proj' has 64 inputs.*group size 128.*"
                                         r"\[16, 32, 64, 0\]"):
        plan_quantization(model, QuantRecipe(linear=WeightQuant(Scheme.W4, 128)))
    with pytest.raises(ValueError, match="quantizes no layer"):
        plan_quantization(model, QuantRecipe(overrides=(Override("nothing.*", WeightQuant(Scheme.W8)),)))
