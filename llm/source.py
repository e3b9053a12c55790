"""Where a model comes from: an HF checkpoint folder, a .gguf file, or objects in memory.

Each loader returns a ``LoadedSource``: the ``*ForCausalLM`` (in the requested dtype),
its HF tokenizer, the tokenizer bytes to embed and the generation config.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedModel

from .gguf_parse_once import gguf_parse_once
from .hf_compat import tokenizer_special_flags
from .source_check import SourceError, check_source_path
from .tokenizer import TokenizerKind

__all__ = ["LoadedSource", "load_source", "SourceError"]

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedSource:
    name: str  # what the user passed, for export.* metadata
    model: PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    tokenizer_kind: TokenizerKind
    tokenizer_data: bytes
    generation_config: GenerationConfig | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _generation_config(model: PreTrainedModel, folder: Path | None) -> GenerationConfig | None:
    if folder is not None and (folder / "generation_config.json").exists():
        return GenerationConfig.from_pretrained(folder)
    return model.generation_config


def _tokenizer_bytes_from_folder(folder: Path) -> tuple[TokenizerKind, bytes]:
    if (folder / "tokenizer.json").exists():
        return TokenizerKind.HF_JSON, (folder / "tokenizer.json").read_bytes()
    if (folder / "tokenizer.model").exists():
        return TokenizerKind.SENTENCEPIECE, (folder / "tokenizer.model").read_bytes()
    raise SourceError(
        f"{folder} has no tokenizer.json or tokenizer.model; ember embeds the tokenizer in the .ember file, "
        "so copy the checkpoint's tokenizer files into that folder"
    )


def _tokenizer_bytes_from_hf(tokenizer: Any) -> tuple[TokenizerKind, bytes]:
    """Save a loaded fast tokenizer and read back its tokenizer.json (GGUF and in-memory sources)."""
    with tempfile.TemporaryDirectory(prefix="ember_tok_") as tmp:
        tokenizer.save_pretrained(tmp)
        path = Path(tmp) / "tokenizer.json"
        if not path.exists():
            raise SourceError(
                f"the tokenizer ({type(tokenizer).__name__}) did not save a tokenizer.json; "
                "pass a fast (tokenizers-backed) tokenizer"
            )
        return TokenizerKind.HF_JSON, path.read_bytes()


def _load_folder(folder: Path, dtype: torch.dtype) -> LoadedSource:
    if not (folder / "config.json").exists():
        raise SourceError(f"{folder} has no config.json: it is not a Hugging Face checkpoint folder")
    kind, data = _tokenizer_bytes_from_folder(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    return LoadedSource(folder.name, model, tokenizer, kind, data, _generation_config(model, folder))


def _load_gguf(path: Path, dtype: torch.dtype) -> LoadedSource:
    with gguf_parse_once() as readers:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        # transformers dequantizes GGUF weights (to fp32) while loading.
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype,
                                                     attn_implementation="eager")
    kind, data = _tokenizer_bytes_from_hf(tokenizer)
    reader = readers.get(str(path.resolve()))  # kept for --quant gguf, which reads the same blocks
    extra = {"gguf_reader": reader} if reader is not None else {}
    return LoadedSource(path.name, model, tokenizer, kind, data, _generation_config(model, None), extra)


def load_source(source: Any, dtype: str, tokenizer: Any = None) -> LoadedSource:
    """``source``: a checkpoint folder, a ``.gguf`` path, or a ``PreTrainedModel`` (then ``tokenizer`` is required)."""
    torch_dtype = _TORCH_DTYPES[dtype]
    if isinstance(source, PreTrainedModel):
        if tokenizer is None:
            raise SourceError("exporting an in-memory model needs its tokenizer: pass tokenizer=...")
        model = source.to(torch_dtype)
        kind, data = _tokenizer_bytes_from_hf(tokenizer)
        name = getattr(model.config, "name_or_path", "") or type(model).__name__
        return LoadedSource(str(name), model, tokenizer, kind, data, model.generation_config)
    if tokenizer is not None:
        raise SourceError("tokenizer= is only for in-memory models; a folder or .gguf brings its own")
    path = check_source_path(source)
    if path.is_dir():
        return _load_folder(path, torch_dtype)
    if path.suffix.lower() == ".gguf":
        return _load_gguf(path, torch_dtype)
    raise SourceError(f"{path} is neither a checkpoint folder nor a .gguf file")


def tokenizer_config_json(tokenizer: Any, bos_id: int | None, eos_ids: list[int], pad_id: int | None) -> str:
    """The ``tokenizer.config`` metadata: what ember's Tokenizer and chat templates need."""
    special_map = {k: v for k, v in tokenizer.special_tokens_map.items() if isinstance(v, (str, list))}
    add_bos, add_eos = tokenizer_special_flags(tokenizer)
    return json.dumps(
        {
            "bos_id": bos_id,
            "eos_ids": eos_ids,
            "pad_id": pad_id,
            "add_bos_token": add_bos,
            "add_eos_token": add_eos,
            "special_tokens_map": special_map,
            "all_special_ids": [int(i) for i in tokenizer.all_special_ids],
            "tokenizer_class": type(tokenizer).__name__,
        },
        ensure_ascii=False,
    )
