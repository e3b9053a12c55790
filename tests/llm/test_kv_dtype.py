"""The KV cache dtype (``--kv-dtype``): export -> file -> runtime against the eager wrapper that
stores its cache the same way, the state's size, and the metadata.

The eager wrapper (``ExportableLLM`` with ``kv_dtype``) runs ember's Python references
(``ember::quantize_kv``, ``ember::attend_cache_int8``), so the file must give its greedy tokens and
logits; the quality cost against an fp32 cache is measured on real prose by ``ember eval``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import ember.runtime
from ember.export import lower
from ember.llm.config import ExportConfig
from ember.llm.exportable import ExportableLLM

from .tiny_models import MAX_CONTEXT_LEN, MAX_SEQ_LEN, assert_traces_match, clone_model, make_tiny_model, step_greedy

STEPS = 32
# An int8 cache quantizes activations (keys, values, and the queries that score them): where the
# file's and eager's values, ~1e-7 apart, straddle a rounding boundary, one code differs by one
# step. In these tiny models one such flip moves the logits by up to ~5e-4 of the largest, and
# the change fades over the following steps; 1 in 6 of the traces below shows one. Greedy tokens
# must still match; the kernels themselves are held to 1e-4 on identical inputs
# (tests/runtime/test_kv_cache_kernels.py). An fp16 cache rounds each key and value to fp16 the same
# way: a value whose fp32 inputs differ by an ulp can round to the neighbouring fp16 (4.9e-4 apart,
# relative); on an Intel Xeon (PyTorch's fp32 kernels rounding differently there than on a Zen 4) one
# such flip moved llama's logits by 1.7e-4 of the largest at step 21, with the kernels unchanged.
RTOL = {"fp16": 5e-4, "int8": 2e-3}


def _export(case: str, kv_dtype: str, tmp_path: Path):
    model, config = make_tiny_model(case)
    wrapper = ExportableLLM(clone_model(model), ExportConfig(max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN,
                                                             kv_dtype=kv_dtype))
    program = lower(wrapper.export(functionalize=False), metadata={"llm.family": config.model_type})
    assert "<copy to state>" not in program.method_stats("forward")["ops"], "the KV cache must be updated in place"
    path = tmp_path / f"{case}-{kv_dtype}.ember"
    program.save(path)
    return ember.runtime.load(path), wrapper, config


# GQA (both dtypes), QK-norm + sliding windows, soft-capping + sliding windows
@pytest.mark.parametrize("case,kv_dtype", [("llama", "fp16"), ("llama", "int8"), ("qwen3", "int8"), ("gemma2", "int8")])
def test_file_matches_eager_with_the_same_cache(case: str, kv_dtype: str, tmp_path: Path) -> None:
    prog, wrapper, config = _export(case, kv_dtype, tmp_path)

    def file_step(tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        (logits,) = prog.run("forward", tokens, pos)
        return torch.from_numpy(logits)

    g = torch.Generator().manual_seed(7)
    # the second prompt is longer than max_seq_len: prefill in chunks, then decode over the cache
    for prompt in (torch.randint(3, config.vocab_size, (5,), generator=g).tolist(),
                   torch.randint(3, config.vocab_size, (MAX_SEQ_LEN + 5,), generator=g).tolist()):
        prog.reset_state()
        wrapper.reset_cache()
        expected = step_greedy(wrapper, prompt, STEPS, MAX_SEQ_LEN)
        actual = step_greedy(file_step, prompt, STEPS, MAX_SEQ_LEN)
        assert_traces_match(actual, expected, rtol=RTOL[kv_dtype])


def test_cache_state_size_and_dtype() -> None:
    """The file's program state: fp16 half of fp32; int8 one byte per value plus one fp32 scale per
    row of head_dim values."""
    sizes = {}
    for kv_dtype in ("fp32", "fp16", "int8"):
        model, _ = make_tiny_model("llama")
        wrapper = ExportableLLM(model, ExportConfig(max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN,
                                                    kv_dtype=kv_dtype))
        state = lower(wrapper.export(functionalize=False)).state_tensors()
        sizes[kv_dtype] = sum(t.nbytes for t in state)
        cache_dtypes = {t.dtype for t in state if "_cache_" in t.name}
        assert cache_dtypes == {{"fp32": "float32", "fp16": "float16", "int8": "int8"}[kv_dtype]}
        assert any(t.name.startswith("k_scale_") for t in state) == (kv_dtype == "int8")
    head_dim = 64 // 4
    assert sizes["fp16"] * 2 == sizes["fp32"]
    assert sizes["int8"] * 4 * head_dim == sizes["fp32"] * (head_dim + 4)


def test_kv_dtype_is_validated() -> None:
    with pytest.raises(ValueError, match="kv_dtype 'int4' is not supported.*fp16"):
        ExportConfig(kv_dtype="int4")


@pytest.mark.slow
def test_smollm2_int8_cache_costs_little_at_long_context(tmp_path: Path) -> None:
    """The packaged SmolLM2 GGUF (its own blocks, exact) with an int8 KV cache, scored over one 2,048-token
    window of prose against transformers on the same GGUF in fp32 (the same weights: `--quant gguf` keeps
    them bit for bit, and with an fp32 cache the file scores 0.9995 of it): the int8 cache adds <= 0.5% to
    the perplexity, and still answers."""
    import ember
    from ember.evals import evaluate
    from ember.llm.exporter import export_llm

    from .gguf_fixture import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    path = tmp_path / "smol-int8.ember"
    export_llm(str(gguf), path, quant="gguf", kv_dtype="int8", logits="all", max_context_len=2048, progress=False)
    result = evaluate(path, tokens=2048, window=2048, reference=str(gguf), progress=False)
    assert ember.load(path).metadata["llm.kv_dtype"] == "int8"
    print(f"\nperplexity over 2,048 tokens: int8 cache {result.perplexity:.4f}, fp32 reference "
          f"{result.reference_perplexity:.4f}, ratio {result.ppl_ratio:.5f}")
    assert result.ppl_ratio <= 1.005
    answer = ember.load(path).chat([{"role": "user", "content": "What is the capital of France?"}],
                                   max_new_tokens=16, temperature=0)
    assert "Paris" in answer, answer
