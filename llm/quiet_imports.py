"""Keeps third-party import-time noise out of ember's command-line output.

torchao logs "Failed to load ..._C_mxfp8..." for GPU-only extensions, torch's pytree logs
deprecation warnings for torchao's enums, and transformers draws its own progress bars while
dequantizing a GGUF. None of it is actionable for an ember user; `--verbose` shows it again.
Called by CLI commands only (a library must not change its caller's logging or warnings).
"""

from __future__ import annotations

import logging
import os
import warnings

__all__ = ["silence_third_party_noise"]

_LOGGERS = ("torchao", "torch.utils._pytree", "torch._export", "torch.export", "transformers")


def silence_third_party_noise() -> None:
    """Before torch / torchao / transformers are imported: their warnings and log lines below ERROR off."""
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=r"(torch|torchao|transformers|accelerate|gguf)(\.|$)")
    warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")  # torch's LeafSpec deprecation
    try:
        from transformers.utils import logging as hf_logging  # noqa: PLC0415 - only after the env vars are set
    except ImportError:
        return
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
