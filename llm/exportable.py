"""The module torch.export sees: ``forward(tokens[1, T], input_pos[1]) -> logits``.

One method covers prefill (T up to max_seq_len) and decode (T = 1). K/V of the step are
written into the ``k_cache_{i}``/``v_cache_{i}`` buffers at input_pos .. input_pos+T-1
and attention runs through ``torch.ops.ember.attend_cache``, which reads only the
first input_pos+T cache slots (decode cost grows with the position).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from . import hf_compat
from .adapters import FamilyAdapter, ModelQuirks, get_adapter
from .config import DType, ExportConfig, KVDType, LogitsMode
from .kv_cache import StaticKVCache

__all__ = ["ExportableLLM"]


class ExportableLLM(nn.Module):
    """Wraps an HF ``*ForCausalLM``. It takes over the model: switches it to eval mode,
    freezes its parameters and sets its attention implementation (on its config) to ember's."""

    def __init__(self, model: PreTrainedModel, config: ExportConfig, adapter: FamilyAdapter | None = None) -> None:
        super().__init__()
        hf_config = hf_compat.text_config(model.config)
        self.adapter = adapter or get_adapter(hf_config.model_type)
        self.adapter.check(hf_config)
        self.quirks: ModelQuirks = self.adapter.quirks(hf_config)
        self.export_config = config
        self.vocab_size = int(hf_config.vocab_size)

        model.eval()
        model.requires_grad_(False)
        hf_compat.use_ember_attention(model)
        self.model = model
        activations = {DType.FLOAT32: torch.float32, DType.BFLOAT16: torch.bfloat16,
                       DType.FLOAT16: torch.float16}[config.dtype]
        kv_dtype = {KVDType.AUTO: activations, KVDType.FP32: torch.float32, KVDType.FP16: torch.float16,
                    KVDType.INT8: torch.int8}[config.kv_dtype]
        self.cache = StaticKVCache(self, hf_compat.cache_geometry(hf_config, config.max_context_len), kv_dtype)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """tokens: int64 [1, T]; input_pos: int64 [1] -> logits [1, vocab] ("last") or [1, T, vocab] ("all")."""
        n_tokens = tokens.shape[1]
        positions = input_pos + torch.arange(n_tokens, dtype=torch.int64, device=tokens.device)  # [T]
        last_only = self.export_config.logits is LogitsMode.LAST
        logits = hf_compat.causal_lm_logits(
            self.model, tokens, positions, input_pos, self.cache, last_only, self.quirks.layers
        )  # [1, T or 1, vocab]
        return logits[:, -1, :] if last_only else logits

    def reset_cache(self) -> None:
        self.cache.reset()

    def example_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        # T = 2: a size-1 example would make torch.export specialize T to 1.
        return torch.zeros((1, 2), dtype=torch.int64), torch.zeros((1,), dtype=torch.int64)

    def dynamic_shapes(self) -> dict[str, dict[int, torch.export.Dim] | None]:
        seq = torch.export.Dim("seq_len", min=1, max=self.export_config.max_seq_len)
        return {"tokens": {1: seq}, "input_pos": None}

    def export(self, functionalize: bool = True) -> torch.export.ExportedProgram:
        """torch.export (non-strict). Functionalized by default: cache writes become ``index_copy``
        nodes listed in ``graph_signature.buffers_to_mutate``. ``functionalize=False`` skips that
        pass (about a third of the export time of a 135M model) for callers that hand the program
        to ``ember.export.lower``, whose decomposition functionalizes it anyway. The cache is left
        zeroed."""
        self.reset_cache()
        with torch.no_grad():
            program = torch.export.export(
                self, self.example_inputs(), dynamic_shapes=self.dynamic_shapes(), strict=False
            )
            if functionalize:
                program = program.run_decompositions({})
        self.reset_cache()
        return program
