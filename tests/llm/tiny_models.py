"""Tiny random-weight models of every supported family + the HF eager greedy reference.

Reusable by runtime-side parity tests: build a model with ``make_tiny_model(family)``,
export it, and compare against ``reference_greedy(model, prompt, steps)``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

VOCAB = 384
SLIDING_WINDOW = 8
MAX_CONTEXT_LEN = 64
MAX_SEQ_LEN = 16

_COMMON: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    tie_word_embeddings=False,
)

# Test case name -> (HF model_type, config overrides). Several cases may share a family.
TINY_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", {"tie_word_embeddings": True}),
    "llama3_rope": (
        "llama",
        {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            }
        },
    ),
    "qwen2": ("qwen2", {"use_sliding_window": True, "sliding_window": SLIDING_WINDOW, "max_window_layers": 1}),
    "qwen3": ("qwen3", {"head_dim": 16, "use_sliding_window": True, "sliding_window": SLIDING_WINDOW, "max_window_layers": 1}),
    "mistral": ("mistral", {"sliding_window": SLIDING_WINDOW, "head_dim": 16}),
    "phi3": ("phi3", {"sliding_window": SLIDING_WINDOW, "original_max_position_embeddings": 256}),
    "gemma2": (
        "gemma2",
        {
            "head_dim": 16,
            "sliding_window": SLIDING_WINDOW,
            "query_pre_attn_scalar": 16,
            "attn_logit_softcapping": 5.0,
            "final_logit_softcapping": 3.0,
            "tie_word_embeddings": True,
        },
    ),
    "gemma3_text": (
        "gemma3_text",
        {
            "head_dim": 16,
            "sliding_window": SLIDING_WINDOW,
            "query_pre_attn_scalar": 16,
            "layer_types": ["sliding_attention", "full_attention"],
            "final_logit_softcapping": 3.0,
            "tie_word_embeddings": True,
        },
    ),
}


def make_tiny_config(case: str) -> PretrainedConfig:
    if case not in TINY_CONFIGS:
        raise KeyError(f"no tiny config {case!r}; known: {sorted(TINY_CONFIGS)}")
    model_type, overrides = TINY_CONFIGS[case]
    return AutoConfig.for_model(model_type, **{**_COMMON, **overrides})


def make_tiny_model(case: str, seed: int = 0) -> tuple[PreTrainedModel, PretrainedConfig]:
    """A random-weight fp32 model. Weights are drawn wider than HF's init (std 0.02) so that
    greedy choices are decisive instead of near-ties between almost uniform logits."""
    config = make_tiny_config(case)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed)
        for name, param in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name or "_norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
                continue
            param.copy_(torch.randn(param.shape, generator=generator) * (0.5 / param.shape[-1] ** 0.5 if param.ndim > 1 else 0.02))
    model.eval()
    return model, model.config


def clone_model(model: PreTrainedModel) -> PreTrainedModel:
    """An independent copy (own config too: ember sets the attention implementation on it)."""
    return copy.deepcopy(model)


@dataclass
class GreedyTrace:
    prompt: list[int]
    tokens: list[int]  # greedy continuation, len = steps
    logits: list[torch.Tensor]  # [vocab] each: after the prompt, then after each fed token (len = steps)


@torch.no_grad()
def reference_greedy(model: PreTrainedModel, prompt: list[int], steps: int) -> GreedyTrace:
    """HF eager, full recompute at every step (no cache): the ground truth."""
    ref = clone_model(model)
    ref.set_attn_implementation("eager")
    ids = list(prompt)
    tokens: list[int] = []
    logits: list[torch.Tensor] = []
    for _ in range(steps):
        out = ref(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()  # [vocab]
        logits.append(out)
        token = int(out.argmax())
        tokens.append(token)
        ids.append(token)
    return GreedyTrace(prompt=list(prompt), tokens=tokens, logits=logits)


@torch.no_grad()
def reference_greedy_cached(model: PreTrainedModel, prompt: list[int], steps: int, max_seq_len: int) -> GreedyTrace:
    """HF eager with its own KV cache (``past_key_values``, as ``generate`` runs it): the prompt in
    chunks of max_seq_len, then one token per step, the same evaluation order as ``step_greedy``.

    Same math as ``reference_greedy`` but not the same fp32 bits: a full recompute multiplies
    [T, K] activations where a decode step multiplies [1, K], and the two matmuls may round the
    current row differently by an ulp. Dynamic int8 activations turn such an ulp into a whole
    quantization step when a value sits on a rounding boundary (and the cache then keeps it), so
    their logits are compared to this reference."""
    ref = clone_model(model)
    ref.set_attn_implementation("eager")
    past = None
    out = None
    for start in range(0, len(prompt), max_seq_len):
        out = ref(input_ids=torch.tensor([prompt[start : start + max_seq_len]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
    tokens: list[int] = []
    logits: list[torch.Tensor] = []
    for i in range(steps):
        last = out.logits[0, -1].float()  # [vocab]
        logits.append(last)
        token = int(last.argmax())
        tokens.append(token)
        if i + 1 < steps:
            out = ref(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
    return GreedyTrace(prompt=list(prompt), tokens=tokens, logits=logits)


StepFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@torch.no_grad()
def step_greedy(step: StepFn, prompt: list[int], steps: int, max_seq_len: int) -> GreedyTrace:
    """Greedy decoding through an ember-style step function ``step(tokens[1, T], input_pos[1]) -> [1, vocab]``
    (the eager wrapper, the exported ``.module()``, or a runtime program). Prefill runs in chunks of max_seq_len."""
    pos = 0
    last = None
    for start in range(0, len(prompt), max_seq_len):
        chunk = prompt[start : start + max_seq_len]
        last = step(torch.tensor([chunk], dtype=torch.int64), torch.tensor([pos], dtype=torch.int64))
        pos += len(chunk)
    tokens: list[int] = []
    logits: list[torch.Tensor] = []
    for i in range(steps):
        out = last.reshape(-1).float()  # [vocab]
        logits.append(out)
        token = int(out.argmax())
        tokens.append(token)
        if i + 1 < steps:
            last = step(torch.tensor([[token]], dtype=torch.int64), torch.tensor([pos], dtype=torch.int64))
            pos += 1
    return GreedyTrace(prompt=list(prompt), tokens=tokens, logits=logits)


def assert_traces_match(actual: GreedyTrace, expected: GreedyTrace, rtol: float = 1e-4) -> None:
    assert actual.tokens == expected.tokens, f"greedy tokens differ:\n  got      {actual.tokens}\n  expected {expected.tokens}"
    for i, (got, want) in enumerate(zip(actual.logits, expected.logits)):
        scale = float(want.abs().max())
        err = float((got - want).abs().max())
        assert err <= rtol * max(scale, 1e-6), f"step {i}: max |logit error| {err:.3g} > {rtol} x {scale:.3g}"
