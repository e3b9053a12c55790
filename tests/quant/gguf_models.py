"""Tiny GGUF files written from tiny random HF models (see ``tests/llm/tiny_models.py``).

``write_tiny_gguf(case, path, types)`` builds the tiny model of a test case with rows of 256
(every K-quant needs rows that are a multiple of 256), names its tensors as llama.cpp does,
permutes llama's q/k rows as llama.cpp's converter does, encodes each tensor in the GGUF type
``types`` picks for it and writes the metadata transformers needs to load the file back
(``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)``).

gguf-py quantizes Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (``gguf.quants.quantize``) but not the
K-quants, so those tensors get random blocks: random codes and sub-block scales (every bit pattern occurs)
with the super-block scales set so the weights have the tiny model's spread. The model is
whatever the file says either way: tests compare against the model transformers loads from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from transformers import AutoModelForCausalLM, PreTrainedModel

from tests.llm.tiny_models import make_tiny_config

ROW = 256  # hidden size: one K-quant super-block per row
INTERMEDIATE = 512
HEADS = 4
KV_HEADS = 2
# transformers 5.23 reads no head_dim from a qwen3 GGUF (Qwen3Config's default, 128, applies)
HEAD_DIMS = {"qwen3": 128}

# test case (tests/llm/tiny_models.py) -> GGUF architecture name
GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3", "gemma2": "gemma2",
             "gemma3_text": "gemma3"}

TypePicker = Callable[[str, tuple[int, ...]], QT]  # (GGUF tensor name, numpy shape) -> type


def make_tiny_model_256(case: str, seed: int = 0) -> PreTrainedModel:
    """The tiny model of ``case`` with hidden size 256 and the head_dim transformers reads back
    from a GGUF header of that family; random weights spread like ``make_tiny_model``'s."""
    config = make_tiny_config(case)
    config.hidden_size = ROW
    config.intermediate_size = INTERMEDIATE
    config.num_attention_heads = HEADS
    config.num_key_value_heads = KV_HEADS
    config.head_dim = HEAD_DIMS.get(case, ROW // HEADS)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim == 1:
                base = 1.0 if "norm" in name else 0.0
                param.copy_(base + 0.1 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * (0.5 / param.shape[-1] ** 0.5))
    return model.eval()


def _llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permute of q/k rows (transformers undoes it on load)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# Where each block type gguf-py cannot quantize keeps its fp16 super-block scale d, and its fp16
# dmin if any (None), with dmin as a multiple of d that roughly centres the weights.
_RANDOM_FIELDS: dict[QT, tuple[int, int | None, float]] = {
    QT.Q2_K: (80, 82, 1.5),
    QT.Q3_K: (108, None, 0.0),
    QT.Q4_K: (0, 2, 7.5),
    QT.Q5_K: (0, 2, 15.5),
    QT.Q6_K: (208, None, 0.0),
    QT.IQ4_NL: (0, None, 0.0),  # not importable exactly: for the unsupported-type tests
}
RANDOM_BLOCK_TYPES = tuple(_RANDOM_FIELDS)


def random_blocks(rows: int, cols: int, qtype: QT, std: float, rng: np.random.Generator) -> np.ndarray:
    """Random ``qtype`` blocks for a [rows, cols] weight (uint8 [rows, bytes per row]): random
    codes and sub-block scales, the super-block scales set so the dequantized values have about
    ``std`` as their standard deviation."""
    d_at, dmin_at, dmin_ratio = _RANDOM_FIELDS[qtype]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)

    def set_scales(d: np.ndarray) -> None:  # d: fp32 [n_blocks]
        blocks[:, d_at:d_at + 2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
        if dmin_at is not None:
            blocks[:, dmin_at:dmin_at + 2] = (d * dmin_ratio).astype(np.float16).view(np.uint8).reshape(-1, 2)

    set_scales(np.ones(len(blocks), np.float32))
    unit_std = float(gguf.quants.dequantize(blocks, qtype).std())
    set_scales((std / unit_std) * rng.uniform(0.5, 1.5, len(blocks)).astype(np.float32))
    return blocks.reshape(rows, -1)


def encode(weight: np.ndarray, qtype: QT, rng: np.random.Generator) -> np.ndarray:
    """fp32 [rows, cols] -> what GGUFWriter.add_tensor takes for ``qtype``."""
    if qtype == QT.F32:
        return weight.astype(np.float32)
    if qtype == QT.F16:
        return weight.astype(np.float16)
    if qtype in _RANDOM_FIELDS:
        return random_blocks(weight.shape[0], weight.shape[1], qtype, float(weight.std()), rng)
    return gguf.quants.quantize(weight, qtype)  # Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16


def uniform_types(qtype: QT) -> TypePicker:
    """Every matrix in ``qtype``; vectors (norms, biases) in F32 as llama.cpp writes them."""
    return lambda name, shape: qtype if len(shape) == 2 else QT.F32


def write_tiny_gguf(case: str, path: Path, types: TypePicker, seed: int = 0) -> Path:
    """Writes the tiny ``case`` model as a GGUF file at ``path`` (returned)."""
    model = make_tiny_model_256(case, seed)
    config = model.config
    arch = GGUF_ARCH[case]
    arch_enum = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    name_map = gguf.get_tensor_name_map(arch_enum, config.num_hidden_layers)
    rng = np.random.default_rng(seed)

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{case}")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_embedding_length(config.hidden_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(config.vocab_size)
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    writer.add_pad_token_id(config.pad_token_id)
    if getattr(config, "sliding_window", None):
        writer.add_sliding_window(int(config.sliding_window))

    tied = bool(config.tie_word_embeddings)
    for hf_name, tensor in model.state_dict().items():
        if tied and hf_name == "lm_head.weight":
            continue  # a tied model has no output.weight: transformers ties it back
        stem, suffix = hf_name.rsplit(".", 1)
        gguf_name = name_map.get_name(stem)
        if gguf_name is None:
            raise KeyError(f"gguf has no name for {hf_name} ({arch})")
        data = tensor.detach().float().numpy()
        if arch == "llama" and gguf_name.endswith(("attn_q", "attn_k")) and suffix == "weight":
            heads = config.num_attention_heads if gguf_name.endswith("attn_q") else config.num_key_value_heads
            data = _llama_permute(data, heads)
        if arch in ("gemma2", "gemma3") and "norm" in gguf_name:
            data = data + 1.0  # llama.cpp stores gemma's (1 + w) norms; transformers subtracts 1 on load
        qtype = types(f"{gguf_name}.{suffix}", data.shape)
        raw = encode(np.ascontiguousarray(data), qtype, rng)
        writer.add_tensor(f"{gguf_name}.{suffix}", raw, raw_dtype=qtype if raw.dtype == np.uint8 else None)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def load_gguf_model(path: Path) -> PreTrainedModel:
    """The fp32 model transformers loads from the file (what ember's GGUF source does)."""
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                 attn_implementation="eager")
    return model.eval()
