"""Python face of a loaded program: numpy in, numpy out, typed errors."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ember.runtime import _C
from ember.runtime.errors import EmberIOError, InvalidArgumentError

# bfloat16 has no numpy dtype: it crosses the boundary as uint16 bits and comes back as float32.


def _to_numpy(x: Any, index: int) -> tuple[np.ndarray, bool]:
    """Converts an input (numpy array, torch tensor, or anything array-like) without importing torch."""
    if type(x).__module__.startswith("torch"):
        tensor = x.detach().cpu().contiguous()
        if str(tensor.dtype) == "torch.bfloat16":
            return tensor.view(dtype=_torch_int16(tensor)).numpy().view(np.uint16), True
        return tensor.numpy(), False
    try:
        # Contiguous and aligned for its dtype (a view into bytes at an odd offset is copied); a
        # 0-d input keeps rank 0 (np.ascontiguousarray would make it rank 1).
        return np.require(x, requirements=("C", "A")), False
    except Exception as exc:  # noqa: BLE001 - numpy raises many types here
        raise InvalidArgumentError(f"input {index} ({type(x).__name__}) cannot be converted to an array: {exc}") from exc


def _torch_int16(tensor: Any) -> Any:
    import torch  # only reached when the caller already uses torch

    return torch.int16


def _from_bits(array: np.ndarray, is_bf16: bool) -> np.ndarray:
    if not is_bf16:
        return array
    return (array.astype(np.uint32) << 16).view(np.float32)


class Program:
    """A loaded .ember program. Methods are instantiated on first use and reused."""

    def __init__(self, native: Any, source: str):
        self._native = native
        self.source = source

    @property
    def methods(self) -> list[str]:
        return list(self._native.methods)

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self._native.metadata)

    @property
    def file_size(self) -> int:
        return int(self._native.file_size)

    @property
    def format_version(self) -> tuple[int, int]:
        return tuple(self._native.format_version)

    def run(self, method: str, *inputs: Any) -> list[Any]:
        """Runs `method` on `inputs` and returns its outputs as numpy arrays (copies).

        Safe to call from several threads: calls of one method run one at a time, different
        methods run concurrently (they share the program's state), and the GIL is released
        while waiting and while running.
        """
        converted = [_to_numpy(x, i) for i, x in enumerate(inputs)]
        outs = self._native.run(method, converted)
        return [_from_bits(a, bf16) if isinstance(a, np.ndarray) else a for a, bf16 in outs]

    def method_info(self, method: str) -> dict[str, Any]:
        """Inputs (dtype, bounds, dynamic dims), output count, arena size and instructions."""
        return dict(self._native.method_info(method))

    def reset_state(self) -> None:
        """Restores program state (e.g. the KV cache) to its initial value."""
        self._native.reset_state()

    def __repr__(self) -> str:
        return f"ember.runtime.Program({self.source!r}, methods={self.methods})"


def load(source: str | os.PathLike[str] | bytes, *, mmap: bool = True) -> Program:
    """Loads a program from a path or from bytes.

    From a path, ``mmap=True`` maps the file (weights are never copied; near-instant load) and
    ``mmap=False`` reads it into private memory backed by 2 MiB pages where the OS allows, which
    makes memory-bound inference faster at the cost of one copy at load.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Program(_C.load_bytes(bytes(source)), "<bytes>")
    path = os.fspath(source)
    if not os.path.exists(path):
        raise EmberIOError(f"no such file: '{path}'")
    return Program(_C.load_file(path, bool(mmap)), path)
