"""Typed exceptions raised by the ember runtime; each carries the runtime's message."""

from __future__ import annotations


class EmberError(RuntimeError):
    """Base class of every error raised by the ember runtime."""


class InvalidArgumentError(EmberError, ValueError):
    """A caller passed a bad value: wrong input count, dtype, rank or a size above its bound."""


class InvalidProgramError(EmberError):
    """The file is not a valid .ember program (bad magic, version, index, offset or size)."""


class NotFoundError(EmberError, KeyError):
    """An unknown method, kernel, backend or metadata key."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class NotSupportedError(EmberError):
    """A valid request that this build of ember cannot serve."""


class OutOfMemoryError(EmberError, MemoryError):
    """An allocation failed or a planned capacity was exceeded."""


class EmberIOError(EmberError, OSError):
    """The operating system refused to open, map or read a file."""


class InternalError(EmberError):
    """A broken invariant inside ember (a bug: please report it)."""


_BY_CODE: dict[str, type[EmberError]] = {
    "InvalidArgument": InvalidArgumentError,
    "InvalidProgram": InvalidProgramError,
    "NotFound": NotFoundError,
    "NotSupported": NotSupportedError,
    "OutOfMemory": OutOfMemoryError,
    "IO": EmberIOError,
    "Internal": InternalError,
}


def error_class(code_name: str) -> type[EmberError]:
    """Maps a C++ ErrorCode name to its exception class (used by the bindings)."""
    return _BY_CODE.get(code_name, EmberError)
