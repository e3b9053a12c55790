"""Parse a GGUF file once while transformers loads its config, tokenizer and weights from it.

transformers builds a fresh ``gguf.GGUFReader`` for each of the three (config, tokenizer,
weights), and each parse walks every vocabulary string through numpy memmap slices: ~6 s apiece for
SmolLM2's 49,152 tokens. It also rebuilds ``gguf.get_tensor_name_map`` once per submodule (~400
times, ~9 s). Inside ``gguf_parse_once()`` both are memoized: readers by resolved path (they are
read-only memory maps), name maps by (architecture, block count), both pure functions of their
arguments. Outside the context gguf is exactly as it was.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["gguf_parse_once"]


@contextmanager
def gguf_parse_once() -> Iterator[dict[str, Any]]:
    """Yields the reader cache (resolved path -> ``GGUFReader``), so the caller can reuse the parse."""
    import gguf

    original_reader, original_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[str, Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        if mode != "r":
            return original_reader(path, mode)
        key = str(Path(path).resolve())
        if key not in readers:
            readers[key] = original_reader(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original_name_map)
    try:
        yield readers
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_name_map
