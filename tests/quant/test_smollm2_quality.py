"""Quality and size of quantized SmolLM2-135M files (the packaged Q4_1 GGUF as the fp32 source).

Each recipe is exported with logits="all" and evaluated over 1,024 tokens of the bundled corpus
(2 windows of 512) twice over: against the fp32 model (the GGUF dequantized by transformers) for
the issue's perplexity-ratio limits, and against the same recipe applied by torchao in eager
PyTorch, which the file must match within 0.5% (the lowering stack adds no error of its own).
`--quant gguf` keeps the GGUF's own blocks, so its file must track the fp32 model itself.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.evals import evaluate
from ember.evals.corpus import Corpus, corpus_windows
from ember.evals.file_model import FileModel
from ember.evals.metrics import Tally
from ember.evals.reference import ReferenceModel
from ember.quant.recipe import PER_CHANNEL, QuantRecipe, ScaleDType, Scheme, WeightQuant

from tests.llm.gguf_fixture import smollm2_gguf_path

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[2] / "evals" / "data" / "pride_and_prejudice.txt"
TOKENS, WINDOW = 1024, 512
MB = 1_000_000

# A file's perplexity must be within 0.5% of torchao eager on the same recipe. Weight-only recipes match
# eager to ~1e-5. Dynamic int8 activations do not: a one-ulp fp32 difference upstream (ember's fused
# norm/attention vs HF's op chain) moves an activation across a rounding step, and a coarse recipe
# amplifies it into a per-token difference of either sign. 8da4w g32 symmetric (perplexity x1.37 of
# fp32) is scored over 4,096 tokens, where those average out: file/eager 0.9978 (AVX-512 VNNI kernels)
# and 0.9974 (AVX2 forced) on a Zen 4, against 1.0018 and 0.9955 over 1,024 tokens (1.0097 seen before).
# 8da8w likewise: 0.9940 over 1,024 tokens on an AVX2-only Zen 3 (before and after that day's kernel
# changes), 0.9960 over 4,096.
EAGER_TOLERANCE = 0.005
EVAL_TOKENS = {"8da4w_g32": 4096, "8da8w": 4096}

# recipe -> (quant argument, largest perplexity ratio to fp32, largest file in bytes)
RECIPES = {
    "q8": ("q8", 1.005, 150 * MB),  # 8w per channel, the table in 8w g32
    "8da8w": (QuantRecipe(linear=WeightQuant(Scheme.DA8W8, PER_CHANNEL),
                          embedding=WeightQuant(Scheme.W8, 32, scale_dtype=ScaleDType.FLOAT16), name="8da8w"),
              1.015, 150 * MB),
    "8da4w_g32": (QuantRecipe(linear=WeightQuant(Scheme.DA8W4, 32), embedding=WeightQuant(Scheme.W8, PER_CHANNEL),
                              name="8da4w_g32"), None, 100 * MB),
    "q4": ("q4", 1.05, 100 * MB),
}
PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about autumn.<|im_end|>\n<|im_start|>assistant\n",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune,",
]


def _export(source, path: Path, **kwargs) -> Path:
    from ember.llm.exporter import export_llm

    export_llm(source, path, max_context_len=WINDOW, max_seq_len=128, logits="all", progress=False, **kwargs)
    return path


@pytest.fixture(scope="module")
def fp32(smollm2_fp32_all):
    """(loaded fp32 source, fp32 file, the fp32 model's perplexity on the eval windows)."""
    from ember.llm.source import load_source

    loaded = load_source(str(smollm2_gguf_path()), "float32")
    path = smollm2_fp32_all
    file = FileModel(path)
    windows = corpus_windows(Corpus.from_file(CORPUS), file.tokenizer, WINDOW, TOKENS // WINDOW, file.bos_prefix)
    reference, tally = ReferenceModel(loaded.model, "fp32"), Tally()
    for ids in windows:
        tally.add(reference.logits(ids)[:-1], np.asarray(ids[1:]))
    return loaded, path, tally.summary()["perplexity"]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_quality_and_size(fp32, name: str, tmp_path: Path) -> None:
    from ember.quant.apply import quantize_model
    from ember.quant.presets import get_preset

    loaded, _, fp32_ppl = fp32
    quant, max_ratio, max_bytes = RECIPES[name]
    path = _export(copy.deepcopy(loaded.model), tmp_path / f"{name}.ember", tokenizer=loaded.tokenizer, quant=quant)
    eager = copy.deepcopy(loaded.model)
    quantize_model(eager, get_preset(quant) if isinstance(quant, str) else quant)
    tokens = EVAL_TOKENS.get(name, TOKENS)
    result = evaluate(path, CORPUS, reference=eager, tokens=tokens, window=WINDOW, progress=False)
    # the ratio to fp32 over the same first TOKENS tokens (windows) the fp32 perplexity was taken on
    ppl = float(np.exp(np.mean(result.window_nll[:TOKENS // WINDOW])))
    size, ratio = path.stat().st_size, ppl / fp32_ppl
    print(f"\n{name}: {size / MB:.1f} MB over {tokens} tokens, perplexity {result.perplexity:.4f} "
          f"(fp32 over {TOKENS}: {fp32_ppl:.4f}), "
          f"torchao eager {result.reference_perplexity:.4f} (file/eager {result.ppl_ratio:.4f}), "
          f"top-1 vs eager {result.top1:.3f}")
    assert result.windows == tokens // WINDOW
    llm = ember.load(path)
    assert llm.metadata["export.backend"] == "cpu"  # quantized exports run on the CPU delegate by default
    answer = llm.chat([{"role": "user", "content": "What is the capital of France?"}], max_new_tokens=16, temperature=0)
    assert "Paris" in answer, answer
    assert abs(result.ppl_ratio - 1.0) <= EAGER_TOLERANCE, "the file must be within 0.5% of torchao eager"
    if max_ratio is not None:
        assert ratio <= max_ratio, f"perplexity ratio to fp32 {ratio:.4f} > {max_ratio}"
    assert size <= max_bytes


def test_gguf_import_tracks_fp32(fp32, tmp_path: Path) -> None:
    loaded, fp32_path, fp32_ppl = fp32
    gguf = smollm2_gguf_path()
    path = _export(str(gguf), tmp_path / "gguf.ember", quant="gguf")
    size = path.stat().st_size
    result = evaluate(path, CORPUS, reference=loaded.model, tokens=TOKENS, window=WINDOW, progress=False)
    print(f"\ngguf: {size / MB:.1f} MB (GGUF {gguf.stat().st_size / MB:.1f} MB), perplexity ratio "
          f"{result.ppl_ratio:.5f}, top-1 {result.top1:.4f}, KL {result.kl_mean:.2e}")
    assert abs(result.reference_perplexity - fp32_ppl) <= 1e-6 * fp32_ppl
    assert result.ppl_ratio <= 1.002
    assert result.top1 >= 0.99
    assert abs(size / gguf.stat().st_size - 1.0) <= 0.10

    quantized, full = ember.load(path), ember.load(fp32_path)
    for prompt in PROMPTS:
        expected = full.generate_ids(prompt, max_new_tokens=64, temperature=0, ignore_eos=True)
        actual = quantized.generate_ids(prompt, max_new_tokens=64, temperature=0, ignore_eos=True)
        full.reset()
        quantized.reset()
        assert len(expected) == 64 and actual == expected, prompt
