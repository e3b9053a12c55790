"""Exact GGUF import (ember.quant.gguf): every supported block type converts bit for bit, the
patched model holds exactly the weights transformers loaded, computes the same logits, and
exports to ember's canonical quantized ops."""

from __future__ import annotations

import copy
from collections import Counter
from functools import lru_cache
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from torch import nn

from ember.export import quant_ops
from ember.quant.gguf import (GGUFImportError, ImportKind, OnUnsupported, UnsupportedGGUFType, apply_gguf_weights)
from ember.quant.gguf_blocks import FLOAT_TYPES, QUANTIZED_TYPES, convert_gguf_tensor
from ember.quant.modules import QuantizedEmbedding, QuantizedLinear
from tests.llm.gguf_fixture import smollm2_gguf_path
from tests.quant.gguf_models import load_gguf_model, random_blocks, uniform_types, write_tiny_gguf

REQUIRED = (QT.Q4_0, QT.Q4_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K)
# Byte offsets of every fp16 field of a block (gguf/quants.py), to fill them with random finite values.
FP16_FIELDS = {QT.Q4_0: (0,), QT.Q4_1: (0, 2), QT.Q5_0: (0,), QT.Q5_1: (0, 2), QT.Q8_0: (0,), QT.Q2_K: (80, 82),
               QT.Q3_K: (108,), QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208,)}
# What the converter keeps: (bits, group size, scale dtype)
LAYOUT = {QT.Q4_0: (4, 32, torch.float16), QT.Q4_1: (4, 32, torch.float16), QT.Q5_0: (8, 32, torch.float16),
          QT.Q5_1: (8, 32, torch.float16), QT.Q8_0: (8, 32, torch.float16), QT.Q2_K: (4, 16, torch.float32),
          QT.Q3_K: (4, 16, torch.float32), QT.Q4_K: (4, 32, torch.float32), QT.Q5_K: (8, 32, torch.float32),
          QT.Q6_K: (8, 16, torch.float32)}
FAMILIES = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def random_raw(qtype: QT, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random blocks (every code and sub-block scale bit pattern) with random finite fp16 fields
    (signs, subnormals, large exponents)."""
    rng = np.random.default_rng(seed)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
    for at in FP16_FIELDS[qtype]:
        halves = rng.integers(0, 1 << 16, size=len(raw), dtype=np.uint16)
        halves = np.where((halves & 0x7C00) == 0x7C00, halves & 0xBFFF, halves)  # no inf / nan
        raw[:, at:at + 2] = halves.view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, -1)


# ---- block converters ---------------------------------------------------------------------------

def test_every_required_type_is_supported():
    assert set(REQUIRED) <= set(QUANTIZED_TYPES)
    assert set(QUANTIZED_TYPES) == set(LAYOUT)


@pytest.mark.parametrize("qtype", QUANTIZED_TYPES, ids=lambda t: t.name)
def test_converter_is_bit_exact_on_random_blocks(qtype):
    rows, cols = 6, 512
    raw = random_raw(qtype, rows, cols)
    expected = torch.from_numpy(gguf.quants.dequantize(raw, qtype))  # fp32 [rows, cols]
    weight = convert_gguf_tensor("w", raw, qtype, (rows, cols))
    bits, group_size, scale_dtype = LAYOUT[qtype]
    assert (weight.bits, weight.group_size, weight.scale.dtype) == (bits, group_size, scale_dtype)
    assert weight.shape == (rows, cols)
    reference = quant_ops.dequantize_weight(weight.qdata, weight.scale, weight.zero_point, weight.offset,
                                            bits, group_size)
    assert bits_equal(reference, expected), f"{qtype.name}: canonical dequantization differs from gguf-py"
    assert bits_equal(weight.dequantize(), reference), f"{qtype.name}: QuantizedWeight.dequantize != quant_ops"


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0], ids=lambda t: t.name)
def test_converter_is_bit_exact_on_quantized_weights_and_keeps_the_gguf_size(qtype):
    w = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32) * 0.03
    raw = gguf.quants.quantize(w, qtype)
    weight = convert_gguf_tensor("w", raw, qtype, w.shape)
    assert bits_equal(weight.dequantize(), torch.from_numpy(gguf.quants.dequantize(raw, qtype)))
    if weight.bits == 4:  # Q4_0 / Q4_1: the same bytes as the GGUF (+1 for Q4_1's shared zero point)
        assert weight.nbytes == raw.nbytes + (1 if qtype == QT.Q4_1 else 0)
    if qtype == QT.Q8_0:
        assert weight.nbytes == raw.nbytes


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q2_K, QT.Q3_K], ids=lambda t: t.name)
def test_k_quant_converter_is_bit_exact_on_realistic_blocks(qtype):
    raw = random_blocks(16, 512, qtype, 0.03, np.random.default_rng(2))
    weight = convert_gguf_tensor("w", raw, qtype, (16, 512))
    assert bits_equal(weight.dequantize(), torch.from_numpy(gguf.quants.dequantize(raw, qtype)))


@pytest.mark.parametrize("qtype", FLOAT_TYPES, ids=lambda t: t.name)
def test_float_types_stay_float_in_their_dtype(qtype):
    w = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    raw = gguf.quants.quantize(w, qtype)
    out = convert_gguf_tensor("w", raw, qtype, (4, 64))
    assert out.dtype == {QT.F32: torch.float32, QT.F16: torch.float16, QT.BF16: torch.bfloat16}[qtype]
    assert bits_equal(out.float(), torch.from_numpy(gguf.quants.dequantize(raw, qtype)))


def test_unsupported_type_names_the_tensor_type_and_supported_types():
    raw = random_blocks(2, 64, QT.IQ4_NL, 0.03, np.random.default_rng(0))
    with pytest.raises(UnsupportedGGUFType, match=r"'blk\.0\.ffn_down\.weight' has type IQ4_NL.*supported: .*Q4_K"):
        convert_gguf_tensor("blk.0.ffn_down.weight", raw, QT.IQ4_NL, (2, 64))


def test_wrong_byte_count_is_rejected():
    raw = gguf.quants.quantize(np.zeros((2, 64), np.float32), QT.Q8_0)
    with pytest.raises(ValueError, match="expected"):
        convert_gguf_tensor("w", raw, QT.Q8_0, (3, 64))


# ---- tiny models ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gguf")


@lru_cache(maxsize=None)
def _tiny_gguf(directory: Path, case: str, qtype: QT) -> Path:
    return write_tiny_gguf(case, directory / f"{case}-{qtype.name}.gguf", uniform_types(qtype))


def _patched(path: Path, **kwargs):
    """(transformers' fp32 model, the same model patched by apply_gguf_weights, the report)."""
    model = load_gguf_model(path)
    reference = copy.deepcopy(model)
    report = apply_gguf_weights(model, path, **kwargs)
    return reference, model, report


def _linear_and_embedding_names(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Embedding))]


def _assert_exact_weights(reference: nn.Module, model: nn.Module) -> int:
    """(b): every replaced module dequantizes to exactly the weight transformers loaded."""
    replaced = 0
    for name, module in model.named_modules():
        if isinstance(module, (QuantizedLinear, QuantizedEmbedding)):
            assert torch.equal(module.weight_data.dequantize(), reference.get_submodule(name).weight), name
            replaced += 1
    return replaced


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def _assert_logits_match(reference: nn.Module, model: nn.Module, rtol: float = 1e-4) -> None:
    """(c): eager logits of the patched model = the fp32 model's, within rtol of the largest."""
    ids = torch.tensor([[1, 17, 250, 3, 99, 383, 42, 7]])
    want, got = _logits(reference, ids), _logits(model, ids)
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= rtol * scale


@pytest.mark.parametrize("case", ["llama", "qwen2"])
@pytest.mark.parametrize("qtype", QUANTIZED_TYPES, ids=lambda t: t.name)
def test_patched_model_holds_exact_weights_and_matches_logits(gguf_dir, case, qtype):
    reference, model, report = _patched(_tiny_gguf(gguf_dir, case, qtype))
    names = _linear_and_embedding_names(reference)
    assert _assert_exact_weights(reference, model) == len(names)  # every Linear / Embedding replaced
    assert not _linear_and_embedding_names(model)
    assert report.float_modules == [] and report.unused_gguf_tensors == []
    bits, group_size, _ = LAYOUT[qtype]
    kinds = {(t.kind, t.gguf_type, t.bits, t.group_size) for t in report.tensors}
    assert kinds == {(ImportKind.QUANTIZED, qtype.name, bits, group_size)}
    assert report.quantized_bytes == sum(t.nbytes for t in report.tensors) > 0
    _assert_logits_match(reference, model)


def test_llama_q_k_rows_are_unpermuted_and_the_tied_lm_head_shares_the_table(gguf_dir):
    _, model, report = _patched(_tiny_gguf(gguf_dir, "llama", QT.Q4_K))
    permuted = sorted(t.module for t in report.tensors if t.rows_permuted)
    assert permuted == [f"model.layers.{i}.self_attn.{p}_proj" for i in range(2) for p in ("k", "q")]
    emb, head = model.model.embed_tokens, model.lm_head
    assert isinstance(emb, QuantizedEmbedding) and isinstance(head, QuantizedLinear)
    for buffer in ("qdata", "scale", "zero_point", "offset"):
        assert getattr(emb, buffer) is getattr(head, buffer), buffer
    tied = [t for t in report.tensors if t.shared_with]
    assert [(t.module, t.shared_with, t.gguf_name) for t in tied] == [
        ("model.embed_tokens", ("lm_head",), "token_embd.weight")]
    assert "model.embed_tokens = lm_head" in report.summary()


def test_untied_qwen2_keeps_biases_and_a_separate_lm_head(gguf_dir):
    reference, model, report = _patched(_tiny_gguf(gguf_dir, "qwen2", QT.Q8_0))
    q = model.model.layers[0].self_attn.q_proj
    assert torch.equal(q.bias, reference.model.layers[0].self_attn.q_proj.bias)
    assert model.lm_head.qdata is not model.model.embed_tokens.qdata
    assert not any(t.shared_with for t in report.tensors)


@pytest.mark.parametrize("case", FAMILIES)
def test_every_family_transformers_loads_from_gguf(gguf_dir, case):
    reference, model, report = _patched(_tiny_gguf(gguf_dir, case, QT.Q4_K))
    assert _assert_exact_weights(reference, model) == len(_linear_and_embedding_names(reference))
    _assert_logits_match(reference, model)
    if case.startswith("gemma"):  # the embedding's sqrt(hidden) scale survives the replacement
        assert model.model.embed_tokens.embed_scale is not None


@pytest.mark.skip(reason="transformers 5.23 cannot load a mistral GGUF: llama.cpp writes mistral as the llama "
                         "architecture (loaded and imported as llama above), and a file named 'mistral' fails in "
                         "transformers' own loader with 'Unknown gguf model_type: mistral in gguf-py'")
def test_mistral():
    pass


def _mixed_types(name: str, shape: tuple[int, ...]) -> QT:
    """Like llama.cpp's Q4_K_M, plus the other exact types and float matrices."""
    if len(shape) == 1:
        return QT.F32
    table = {"token_embd": QT.Q6_K, "attn_v": QT.Q6_K, "ffn_down": QT.Q5_K, "attn_output": QT.F16,
             "ffn_up": QT.BF16, "ffn_gate": QT.Q3_K, "attn_k": QT.Q2_K, "attn_q": QT.Q5_0, "output": QT.Q5_1}
    return next((t for key, t in table.items() if f"{key}." in name or name.startswith(f"{key}.")), QT.Q4_K)


def test_mixed_types_float_matrices_stay_float(gguf_dir):
    path = write_tiny_gguf("qwen2", gguf_dir / "qwen2-mixed.gguf", _mixed_types)
    reference, model, report = _patched(path)
    kinds = {t.gguf_name.split(".")[-2]: (t.kind, t.gguf_type) for t in report.tensors}
    assert kinds["attn_output"] == (ImportKind.FLOAT, "F16") and kinds["ffn_up"] == (ImportKind.FLOAT, "BF16")
    assert kinds["attn_k"] == (ImportKind.QUANTIZED, "Q2_K") and kinds["token_embd"] == (ImportKind.QUANTIZED, "Q6_K")
    layer = model.model.layers[0]
    assert type(layer.self_attn.o_proj) is nn.Linear and type(layer.mlp.up_proj) is nn.Linear
    assert isinstance(layer.mlp.gate_proj, QuantizedLinear) and isinstance(model.lm_head, QuantizedLinear)
    assert report.float_bytes == sum(m.weight.numel() * 4 for m in (layer.self_attn.o_proj, layer.mlp.up_proj)) * 2
    _assert_exact_weights(reference, model)
    _assert_logits_match(reference, model)


def test_unsupported_type_raises_or_keeps_the_float_weight(gguf_dir):
    pick = lambda name, shape: QT.IQ4_NL if name == "blk.0.ffn_down.weight" else uniform_types(QT.Q8_0)(name, shape)
    path = write_tiny_gguf("llama", gguf_dir / "llama-iq4.gguf", pick)
    with pytest.raises(UnsupportedGGUFType, match=r"'blk\.0\.ffn_down\.weight' has type IQ4_NL"):
        _patched(path)
    with pytest.warns(UserWarning, match="IQ4_NL.*keeps the float weight"):
        reference, model, report = _patched(path, on_unsupported=OnUnsupported.KEEP_FLOAT)
    assert type(model.model.layers[0].mlp.down_proj) is nn.Linear
    assert [(t.module, t.kind) for t in report.tensors if t.kind is not ImportKind.QUANTIZED] == [
        ("model.layers.0.mlp.down_proj", ImportKind.DEQUANTIZED)]
    assert "IQ4_NL" in report.summary()
    _assert_logits_match(reference, model)


def test_a_model_not_loaded_from_the_file_is_rejected(gguf_dir):
    other = write_tiny_gguf("llama", gguf_dir / "llama-other-seed.gguf", uniform_types(QT.Q8_0), seed=1)
    model = load_gguf_model(_tiny_gguf(gguf_dir, "llama", QT.Q8_0))
    with pytest.raises(GGUFImportError, match="does not reproduce .* exactly"):
        apply_gguf_weights(model, other)


def test_bfloat16_model(gguf_dir):
    path = _tiny_gguf(gguf_dir, "llama", QT.Q4_1)
    model = load_gguf_model(path).to(torch.bfloat16)
    reference = copy.deepcopy(model)
    apply_gguf_weights(model, path)
    assert model.model.embed_tokens.dtype == torch.bfloat16
    for name, module in model.named_modules():
        if isinstance(module, QuantizedLinear):
            assert torch.equal(module.weight_data.dequantize().to(torch.bfloat16), reference.get_submodule(name).weight)
    ids = torch.tensor([[1, 2, 3]])
    assert _logits(model, ids).isfinite().all()


# ---- export --------------------------------------------------------------------------------------

def _float_weight_ops(program: torch.export.ExportedProgram) -> list[str]:
    """aten linear / matmul / embedding nodes reading a float parameter or buffer."""
    sig = program.graph_signature
    weights = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    found = []
    for node in program.graph.nodes:
        if node.op == "call_function" and any(k in str(node.target) for k in ("linear", "mm", "embedding", "matmul")) \
                and "ember" not in str(node.target):
            names = [a.name for a in node.all_input_nodes]
            found += [f"{node.target}({weights[n]})" for n in names if n in weights]
    return found


@pytest.mark.parametrize("case", ["llama", "gemma3_text"])
def test_export_contains_only_quantized_ops_for_replaced_layers(gguf_dir, case):
    _, model, report = _patched(_tiny_gguf(gguf_dir, case, QT.Q4_0))
    ids = torch.tensor([[1, 2, 3, 4]])
    program = torch.export.export(model, (), {"input_ids": ids, "use_cache": False}, strict=False)
    ops = Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")
    assert ops["ember.quantized_embedding.default"] == 1
    assert ops["ember.quantized_linear.default"] == sum(1 + len(t.shared_with) for t in report.tensors) - 1
    assert _float_weight_ops(program) == []
    # the tied table is one placeholder read by both ops
    embedding = next(n for n in program.graph.nodes if n.target == torch.ops.ember.quantized_embedding.default)
    head = [n for n in program.graph.nodes if n.target == torch.ops.ember.quantized_linear.default][-1]
    assert head.args[1] is embedding.args[0]
    assert torch.equal(program.module()(input_ids=ids, use_cache=False).logits, _logits(model, ids))


def test_exportable_llm_exports_the_quantized_ops(gguf_dir):
    from ember.llm.config import ExportConfig
    from ember.llm.exportable import ExportableLLM

    _, model, _ = _patched(_tiny_gguf(gguf_dir, "llama", QT.Q6_K))
    program = ExportableLLM(model, ExportConfig(max_context_len=32, max_seq_len=8)).export()
    ops = Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")
    assert ops["ember.quantized_embedding.default"] == 1 and ops["ember.quantized_linear.default"] == 15
    assert _float_weight_ops(program) == []


# ---- the packaged model ----------------------------------------------------------------------------

@pytest.mark.slow
def test_smollm2_q4_1_imports_exactly():
    from transformers import AutoModelForCausalLM

    path = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    n_modules = len(_linear_and_embedding_names(model))
    report = apply_gguf_weights(model, path)  # raises unless every tensor is reproduced exactly
    assert not _linear_and_embedding_names(model)
    assert sum(1 + len(t.shared_with) for t in report.tensors) == n_modules
    assert Counter(t.gguf_type for t in report.quantized) == {"Q4_1": 210, "Q8_0": 1}
    emb, head = model.model.embed_tokens, model.lm_head
    assert emb.qdata is head.qdata and emb.scale is head.scale
    assert abs(report.quantized_bytes - path.stat().st_size) <= 0.1 * path.stat().st_size
    assert abs(report.quantized_bytes - 98_362_432) <= 0.1 * 98_362_432
