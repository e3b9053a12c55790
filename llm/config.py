"""Typed export configuration (pure Python: no torch import)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["DType", "KVDType", "LogitsMode", "ExportConfig"]


class DType(str, Enum):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"

    @classmethod
    def parse(cls, value: "DType | str") -> "DType":
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"dtype {value!r} is not supported; use one of {[d.value for d in cls]}"
            ) from None


class KVDType(str, Enum):
    """What the KV cache stores. At long context the cache, not the weights, is most of what a
    4-bit decode step reads (SmolLM2 at position ~1,900: ~88 MB of fp32 cache per token)."""

    AUTO = "auto"  # the activations' dtype (fp32 for a float32 export)
    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"  # int8 codes, one fp32 scale per token and head (ember::quantize_kv)

    @classmethod
    def parse(cls, value: "KVDType | str") -> "KVDType":
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"kv_dtype {value!r} is not supported; use one of {[d.value for d in cls]} "
                "(fp16 halves the cache, int8 quarters it)"
            ) from None


class LogitsMode(str, Enum):
    LAST = "last"  # [1, vocab]: the next-token distribution (generation)
    ALL = "all"  # [1, T, vocab]: every position (evals, perplexity)

    @classmethod
    def parse(cls, value: "LogitsMode | str") -> "LogitsMode":
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"logits {value!r} is not supported; use 'last' (generation) or 'all' (evals)"
            ) from None


@dataclass(frozen=True)
class ExportConfig:
    """What to export: cache size, prefill chunk size, weights dtype, logits shape, KV cache dtype."""

    max_context_len: int = 2048
    max_seq_len: int = 128
    dtype: DType = DType.FLOAT32
    logits: LogitsMode = LogitsMode.LAST
    kv_dtype: KVDType = KVDType.AUTO

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", DType.parse(self.dtype))
        object.__setattr__(self, "logits", LogitsMode.parse(self.logits))
        object.__setattr__(self, "kv_dtype", KVDType.parse(self.kv_dtype))
        for name in ("max_context_len", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.max_seq_len < 2:
            raise ValueError(
                f"max_seq_len must be >= 2 (it bounds the prefill chunk; decode uses T=1), got {self.max_seq_len}"
            )
        if self.max_seq_len > self.max_context_len:
            raise ValueError(
                f"max_seq_len ({self.max_seq_len}) must not exceed max_context_len ({self.max_context_len}); "
                "lower max_seq_len or raise max_context_len"
            )
