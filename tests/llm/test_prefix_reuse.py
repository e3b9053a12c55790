"""A repeated prompt gives the fresh prompt's answer. A prompt's tokens after what the session already
holds are prefilled, at least its last two, in chunks of two rows or more: its last token never takes the
one-row decode path, whose rounding differs from a prefill chunk's (with int8 activations, enough to change
a greedy answer a few tokens on). The tiny Llama, fp32 and `8da4w` (int8 activations, CPU delegate); the
bit-for-bit claims are for int8 activations: fp32 linears change summation order with the row count (a GEMM
from some size), which float activations carry as rounding noise."""

from __future__ import annotations

import numpy as np
import pytest

import ember

from tests.runners.tiny_llm import MAX_SEQ_LEN, tiny_llm_path

LENGTHS = [1, 2, 3, MAX_SEQ_LEN, MAX_SEQ_LEN + 1, MAX_SEQ_LEN + 2, 2 * MAX_SEQ_LEN + 1]


@pytest.fixture(scope="module", params=[None, "8da4w"], ids=["fp32", "8da4w"])
def model(request):
    """(an LLM, whether its linears take int8 activations)."""
    return ember.load(tiny_llm_path(quant=request.param), threads=2), request.param == "8da4w"


def test_a_prompts_last_row_is_the_same_in_any_chunk_of_two_or_more(model) -> None:
    """The kernels' side of it: the last token's logits from a two-row chunk after a prefill of the rest
    are bit for bit those of one chunk holding the whole prompt."""
    llm, int8_activations = model
    if not int8_activations:
        pytest.skip("bit for bit across row counts only with int8 activations")
    rng = np.random.default_rng(3)
    for n in range(2, MAX_SEQ_LEN + 1):
        prompt = rng.integers(5, llm.vocab_size, n).tolist()
        whole = llm.forward(prompt, 0).copy()
        if n > 2:
            llm.forward(prompt[: n - 2], 0)
        tail = llm.forward(prompt[n - 2:], n - 2)
        assert np.array_equal(tail, whole), (n, float(np.abs(tail - whole).max()))


def test_a_repeated_prompt_gives_the_fresh_answer(model) -> None:
    llm, int8_activations = model
    rng = np.random.default_rng(11)
    for trial in range(6):
        for n in LENGTHS:
            prompt = rng.integers(5, llm.vocab_size, n).tolist()
            llm.reset()
            fresh = llm.generate_ids(prompt, max_new_tokens=16, temperature=0)
            assert llm.stats.reused_tokens == 0 and llm.stats.prefill_tokens == n
            again = llm.generate_ids(prompt, max_new_tokens=16, temperature=0)
            assert again == fresh or not int8_activations, (trial, n)
            assert llm.stats.reused_tokens == max(0, n - 2) and llm.stats.prefill_tokens == min(n, 2)
