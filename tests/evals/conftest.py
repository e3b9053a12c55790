"""Tiny random-weight LLM files for the eval tests: one exported with logits="all", one with "last",
the same model saved as an HF folder (the reference), and a 384-token BPE tokenizer trained on the
bundled corpus (the tiny models' vocabulary is 384) that prepends BOS like Llama's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..llm.tiny_models import VOCAB, clone_model, make_tiny_model

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "evals" / "data" / "pride_and_prejudice.txt"
TASKS = Path(__file__).resolve().parent / "data"
CONTEXT = 64
SEQ = 16


def tiny_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS.read_text(encoding="utf-8")[:200_000]], trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


@dataclass
class TinyFiles:
    model: Any  # the HF model (fp32, eager)
    tokenizer: Any  # its HF tokenizer
    reference: Path  # HF checkpoint folder of the same model
    all: Path  # exported with logits="all"
    last: Path  # exported with logits="last"


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> TinyFiles:
    from ember.llm.exporter import export_llm

    root = tmp_path_factory.mktemp("evals_tiny")
    model, _ = make_tiny_model("llama")
    tok = tiny_tokenizer()
    assert len(tok) == VOCAB
    reference = root / "reference"
    model.save_pretrained(reference)
    tok.save_pretrained(reference)
    files = {}
    for mode in ("all", "last"):
        files[mode] = root / f"tiny_{mode}.ember"
        export_llm(clone_model(model), files[mode], max_context_len=CONTEXT, max_seq_len=SEQ, logits=mode,
                   tokenizer=tok, progress=False)
    return TinyFiles(model, tok, reference, files["all"], files["last"])
