"""The reference: the source model in transformers, eager attention, fp32, all positions at once.

Loaded through ember's own loader (`ember.llm.source.load_source`), so a checkpoint folder or a
.gguf file means exactly what it means to `ember export`. Needs torch and transformers (imported
here, only when a reference is asked for).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.evals.errors import EvalError

__all__ = ["ReferenceModel"]


class ReferenceModel:
    """Wraps a transformers *ForCausalLM: `logits(ids)` -> float32 [len(ids), vocab], no KV cache."""

    def __init__(self, model: Any, name: str, tokenizer: Any = None) -> None:
        self.model = model.eval()
        self.name = name
        self.tokenizer = tokenizer  # the reference's HF tokenizer, when known (for a consistency check)

    @classmethod
    def load(cls, source: Any) -> "ReferenceModel":
        """`source`: an HF checkpoint folder or a .gguf file (loaded in fp32 with eager attention), or an
        in-memory PreTrainedModel, used as it is."""
        try:
            import torch  # noqa: F401
            from ember.llm.source import SourceError, load_source
        except ImportError as error:
            raise EvalError(
                f"a reference model needs torch and transformers ({error}); "
                "install them with pip install 'ember[export]'") from None
        from transformers import PreTrainedModel

        if isinstance(source, PreTrainedModel):
            return cls(source, str(source.config.name_or_path or type(source).__name__))
        try:
            loaded = load_source(os.fspath(source), "float32")
        except SourceError as error:
            raise EvalError(f"reference: {error}") from None
        return cls(loaded.model, os.path.basename(os.path.normpath(os.fspath(source))), loaded.tokenizer)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def check_compatible(self, vocab_size: int, tokenizer: Any, sample: str) -> list[str]:
        """Raises when the vocabularies differ; returns notes (e.g. the tokenizers disagree)."""
        if self.vocab_size != vocab_size:
            raise EvalError(
                f"the reference '{self.name}' has a vocabulary of {self.vocab_size} but the file has {vocab_size}; "
                "pass the checkpoint the file was exported from")
        notes = []
        if self.tokenizer is not None and sample:
            ours = tokenizer.encode(sample, add_special_tokens=False)
            theirs = list(self.tokenizer.encode(sample, add_special_tokens=False))
            if ours != theirs:
                notes.append("the reference's tokenizer splits the corpus differently from the file's; "
                             "both models are fed the file's token ids")
        return notes

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            tokens = torch.tensor([list(ids)], dtype=torch.int64)  # [1, T]
            out = self.model(input_ids=tokens, use_cache=False).logits[0]  # [T, vocab]
            return out.float().numpy().astype(np.float32, copy=True)

    def __repr__(self) -> str:
        return f"ReferenceModel({self.name!r})"
