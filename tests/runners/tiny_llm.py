"""A tiny random-weight Llama with a tiny byte-level BPE tokenizer and a ChatML template,
exported once per process to a .ember file: the fixture of the runner / API / CLI tests.

The tokenizer is trained on a slice of Pride and Prejudice (or a built-in paragraph) so that
its vocabulary fits the model's 384 ids; it is byte-level, so multi-byte characters split
across tokens and exercise the UTF-8-safe streaming path.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.llm.tiny_models import VOCAB, make_tiny_model

MAX_CONTEXT_LEN = 96
MAX_SEQ_LEN = 8
SPECIAL = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]  # ids 0..4
PAD_ID, BOS_ID, EOS_ID, IM_START_ID, IM_END_ID = range(5)
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_FALLBACK_TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters. Café, naïve, 東京, emoji 🙂."
)
_CACHE: dict[tuple[Any, ...], Path] = {}


def corpus() -> str:
    path = Path(__file__).resolve().parents[2] / "evals" / "data" / "pride_and_prejudice.txt"  # bundled in the repo
    text = path.read_text(encoding="utf-8")[:20000]
    return text + "\n" + _FALLBACK_TEXT


def make_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([corpus()], trainer=trainer)
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="<|im_end|>", pad_token="<pad>",
        additional_special_tokens=["<|im_start|>", "</s>"],
    )
    fast.chat_template = CHATML
    return fast


def tiny_llm_path(eos_token_id: int | None = None, max_context_len: int = MAX_CONTEXT_LEN,
                  quant: str | None = None) -> Path:
    """Exports (once per process and settings) and returns the path of the tiny .ember file.
    `eos_token_id` replaces the model's EOS (to make a chosen greedy token end generation);
    `quant` is a preset name (the linears then run on the CPU delegate)."""
    key = (eos_token_id, max_context_len, quant)
    if key in _CACHE and _CACHE[key].exists():
        return _CACHE[key]
    from ember.llm import export_llm

    model, _ = make_tiny_model("llama")
    tokenizer = make_tokenizer()
    if eos_token_id is not None:
        model.config.eos_token_id = eos_token_id
        model.generation_config.eos_token_id = eos_token_id
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos_token_id)
    folder = tempfile.mkdtemp(prefix="ember-tiny-")
    owner = os.getpid()  # a forked child that exits normally must not remove its parent's file
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(folder, ignore_errors=True))
    out = Path(folder) / f"tiny-{eos_token_id}-{max_context_len}-{quant}.ember"
    export_llm(model, out, max_context_len=max_context_len, max_seq_len=MAX_SEQ_LEN, tokenizer=tokenizer,
               quant=quant, progress=False)
    _CACHE[key] = out
    return out


if __name__ == "__main__":  # python -m tests.runners.tiny_llm [OUT]: export it somewhere
    import sys

    src = tiny_llm_path()
    dst = sys.argv[1] if len(sys.argv) > 1 else os.path.basename(src)
    shutil.copy(src, dst)
    print(dst)
