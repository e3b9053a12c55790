"""Checks a model source path before anything heavy is imported (torch, transformers): a typo
in `ember export` fails in milliseconds with a message saying what is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SourceError", "check_source_path"]


class SourceError(ValueError):
    """The model source is missing something ember needs (the message says what)."""


def check_source_path(source: Any) -> Path:
    """`source` as a Path when it is a checkpoint folder (config.json + tokenizer) or a .gguf file."""
    path = Path(source).expanduser()
    if not path.exists():
        raise SourceError(
            f"model source {str(source)!r} does not exist; pass a local HF checkpoint folder or a .gguf file "
            "(hub ids need network access, which this machine does not have)"
        )
    if path.is_dir():
        if not (path / "config.json").exists():
            raise SourceError(f"{path} has no config.json: it is not a Hugging Face checkpoint folder")
        if not (path / "tokenizer.json").exists() and not (path / "tokenizer.model").exists():
            raise SourceError(
                f"{path} has no tokenizer.json or tokenizer.model; ember embeds the tokenizer in the .ember file, "
                "so copy the checkpoint's tokenizer files into that folder"
            )
        return path
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"GGUF":
        return path
    if head == b"EMBR":
        raise SourceError(f"{path} is already an .ember program; run it with `ember generate {path} -p ...`")
    raise SourceError(
        f"model source {str(source)!r} is neither a checkpoint folder nor a .gguf file; pass the folder that "
        "holds config.json, *.safetensors and the tokenizer, or a .gguf file"
    )
