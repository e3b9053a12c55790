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


def kernel_names() -> list[str]:
    """Names of every kernel registered in this runtime, e.g. 'aten::add.Tensor'."""
    return list(_C.kernel_names())


def cpu_info() -> dict[str, Any]:
    """The CPU and the kernels chosen for it (detected once per process).

    Keys: ``model`` (the CPU's name), ``features`` (avx2, fma, f16c, avx512f/bw/vl, avx512_vnni,
    avx_vnni, amx_tile, amx_int8: bool), ``best_isa`` (the highest kernel level this CPU runs),
    ``isa`` (the level in use: ``EMBER_KERNEL_ISA`` when set, else ``best_isa``), ``isa_error``
    (why ``EMBER_KERNEL_ISA`` is refused, or None; loading a program then fails with it) and
    ``kernels`` (each kernel family, e.g. ``"f32.gemv"``, and the level its version uses).
    """
    return dict(_C.cpu_info())


def backend_ids() -> list[str]:
    return list(_C.backend_ids())


def set_num_threads(n: int) -> int:
    """Sets the kernel thread count (process-wide, shared with ember.runners and ember.load).

    ``n`` above the logical CPUs this process may use is lowered to that count with a
    RuntimeWarning (``max_num_threads()``). Returns the count in effect. If the OS refuses to
    start a worker thread, raises OutOfMemoryError once; the pool keeps the threads it started.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 2**31 - 1:
        raise InvalidArgumentError(f"threads must be an int in [1, 2**31), got {n!r}; use about one per physical core")
    return int(_C.set_num_threads(int(n)))


def get_num_threads() -> int:
    """The kernel thread count in effect (process-wide)."""
    return int(_C.get_num_threads())


def max_num_threads() -> int:
    """The most kernel threads ember uses: the logical CPUs this process may run on."""
    return int(_C.max_num_threads())


def set_memory_limit(nbytes: int | None) -> None:
    """Sets the most bytes any one allocation sized by a program file may take (process-wide).

    Program state (the KV cache), each method's activation arena, a delegate's intermediate
    values and the runner's vocabulary-sized buffers are checked against it before they are
    allocated; a file that asks for more fails with OutOfMemoryError instead of exhausting the
    process. The default is the machine's physical memory, or the environment variable
    ``EMBER_MEMORY_LIMIT`` (e.g. ``8G``). ``None`` restores the default.
    """
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 < nbytes < 2**64):
        raise InvalidArgumentError(f"memory limit must be None or a byte count in [1, 2**64), got {nbytes!r}")
    _C.set_memory_limit(0 if nbytes is None else int(nbytes))


def get_memory_limit() -> int:
    """The memory limit in bytes now in force (see set_memory_limit)."""
    return int(_C.get_memory_limit())
