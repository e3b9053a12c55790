"""``to_canonical_modules``: torchao-quantized modules become ember's canonical modules before
torch.export (what ``export_llm`` does), instead of tracing torchao's pattern and fusing it after.

The two routes must give the same file: the same quantized ops reading the same stored values, and
bit-identical runtime logits. The canonical route traces far fewer ops (the point of it: export
time), and the passes stay tested on torchao's own exported pattern.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchao.quantization import IntxWeightOnlyConfig, quantize_
from torchao.quantization.granularity import PerGroup

import ember.runtime
from ember.export import lower
from ember.export.program import Program
from ember.export.quant_ops import ActQuant
from ember.export.weights_report import weight_rows
from ember.llm.config import ExportConfig
from ember.llm.exportable import ExportableLLM
from ember.quant.apply import quantize_model
from ember.quant.canonical_modules import canonical_weight_of, to_canonical_modules
from ember.quant.modules import QuantizedEmbedding, QuantizedLinear
from ember.quant.recipe import PER_CHANNEL, Mapping, Override, QuantRecipe, ScaleDType, Scheme, WeightQuant

from tests.llm.tiny_models import MAX_CONTEXT_LEN, MAX_SEQ_LEN, clone_model, make_tiny_model

RECIPES = {
    "8da4w_g32": QuantRecipe(linear=WeightQuant(Scheme.DA8W4, 32), embedding=WeightQuant(Scheme.W4, 32)),
    "8da8w_asym": QuantRecipe(linear=WeightQuant(Scheme.DA8W8, PER_CHANNEL, Mapping.ASYMMETRIC),
                              embedding=WeightQuant(Scheme.W4, 64, Mapping.ASYMMETRIC)),
    "4w_g32_asym_fp16": QuantRecipe(linear=WeightQuant(Scheme.W4, 32, Mapping.ASYMMETRIC,
                                                       scale_dtype=ScaleDType.FLOAT16),
                                    embedding=WeightQuant(Scheme.W8, PER_CHANNEL)),
}
QLINEAR, QEMBEDDING = "ember::quantized_linear.default", "ember::quantized_embedding.default"


def _export(model: torch.nn.Module, family: str) -> tuple[torch.export.ExportedProgram, Program]:
    wrapper = ExportableLLM(model, ExportConfig(max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN))
    exported = wrapper.export(functionalize=False)
    return exported, lower(exported, metadata={"llm.family": family})


def _logits(program: Program, path: Path, prompt: list[int], steps: int) -> list[torch.Tensor]:
    program.save(path)
    prog = ember.runtime.load(path)
    (logits,) = prog.run("forward", torch.tensor([prompt]), torch.tensor([0]))
    out = [torch.from_numpy(logits)]
    for i in range(steps):
        token = int(out[-1].argmax())
        (logits,) = prog.run("forward", torch.tensor([[token]]), torch.tensor([len(prompt) + i]))
        out.append(torch.from_numpy(logits))
    return out


def _call_count(ep: torch.export.ExportedProgram) -> int:
    return sum(1 for n in ep.graph.nodes if n.op == "call_function")


@pytest.mark.parametrize("recipe", [pytest.param(r, marks=() if r == "8da4w_g32" else pytest.mark.slow)
                                    for r in sorted(RECIPES)])
@pytest.mark.parametrize("case", ["llama", pytest.param("gemma2", marks=pytest.mark.slow), "qwen2"])
def test_canonical_modules_give_the_file_the_passes_give(case: str, recipe: str, tmp_path: Path) -> None:
    model, config = make_tiny_model(case)
    quantize_model(model, RECIPES[recipe])
    canonical = clone_model(model)
    conversion = to_canonical_modules(canonical)
    n_linears = sum(isinstance(m, QuantizedLinear) for m in canonical.modules())
    assert conversion.linears == n_linears > 0 and conversion.embeddings == 1
    assert conversion.shared == (1 if config.tie_word_embeddings else 0)
    dynamic = RECIPES[recipe].linear.scheme.dynamic_activations
    lm_head = canonical.get_output_embeddings()
    acts = {m.act_quant for m in canonical.modules() if isinstance(m, QuantizedLinear) and m is not lm_head}
    assert acts == {ActQuant.INT8_ASYM_PER_TOKEN if dynamic else ActQuant.NONE}
    if config.tie_word_embeddings:  # the lm_head reads the embedding's table (weight-only, as torchao's is)
        assert lm_head.qdata is canonical.get_input_embeddings().qdata and lm_head.act_quant is ActQuant.NONE

    traced, through_passes = _export(clone_model(model), config.model_type)
    direct, through_modules = _export(canonical, config.model_type)
    assert not any("torchao" in str(n.target) for n in direct.graph.nodes)
    # torchao's pattern: a dequantize per weight (and choose_qparams/quantize/dequantize per dynamic input).
    assert _call_count(direct) < _call_count(traced)

    ops_passes = through_passes.method_stats("forward")["ops"]
    ops_modules = through_modules.method_stats("forward")["ops"]
    assert ops_modules == ops_passes and ops_modules[QEMBEDDING] == 1
    rows = lambda p: [(r.shape, r.format, r.bytes, r.users) for r in weight_rows(p)]  # noqa: E731
    assert rows(through_modules) == rows(through_passes)

    prompt = torch.randint(3, config.vocab_size, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    for a, b in zip(_logits(through_modules, tmp_path / "modules.ember", prompt, 6),
                    _logits(through_passes, tmp_path / "passes.ember", prompt, 6)):
        assert torch.equal(a, b)


def test_canonical_weight_refuses_what_has_no_canonical_form() -> None:
    layer = torch.nn.Sequential(torch.nn.Linear(64, 8))
    quantize_(layer, IntxWeightOnlyConfig(weight_dtype=torch.int2, granularity=PerGroup(32)))
    with pytest.raises(ValueError, match=r"module 'lm'.*torch.int2.*int4 / int8"):
        canonical_weight_of("lm", layer[0].weight)


def test_untied_output_and_float_layers_are_left_alone() -> None:
    model, _ = make_tiny_model("mistral")  # untied lm_head
    recipe = QuantRecipe(linear=WeightQuant(Scheme.W8, 32), embedding=WeightQuant(Scheme.W8, 32),
                         overrides=(Override("*.mlp.down_proj", None),))
    quantize_model(model, recipe)
    conversion = to_canonical_modules(model)
    assert conversion.shared == 0  # same scheme as the embedding, but its own (untied) weight
    assert isinstance(model.get_input_embeddings(), QuantizedEmbedding)
    assert isinstance(model.get_output_embeddings(), QuantizedLinear)
    down = [m for n, m in model.named_modules() if n.endswith("mlp.down_proj")]
    assert down and all(type(m) is torch.nn.Linear and type(m.weight) is torch.nn.Parameter for m in down)
