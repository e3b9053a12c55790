"""What a path given where a .ember program is expected really is, said before the loader reads it.

A folder, a missing path, a GGUF file or a Hugging Face checkpoint file each get a message that
names the path and says what to run instead (usually `ember export`), rather than the loader's
"no such file" or "bad magic".
"""

from __future__ import annotations

import os

from ember.runtime.errors import EmberIOError, InvalidArgumentError, InvalidProgramError

__all__ = ["check_program_path"]

EMBER_MAGIC = b"EMBR"
_FOREIGN_MAGIC = {
    b"GGUF": "a GGUF model",
    b"PK\x03\x04": "a zip archive (a PyTorch .bin/.pt checkpoint?)",
}


def check_program_path(path: str | os.PathLike[str]) -> str:
    """Returns `path` as a str when it names a readable file that starts like an .ember program;
    raises EmberIOError / InvalidArgumentError / InvalidProgramError saying what it is otherwise."""
    path = os.fspath(path)
    if os.path.isdir(path):
        has_checkpoint = os.path.isfile(os.path.join(path, "config.json"))
        hint = (f"it looks like a Hugging Face checkpoint: export it first with `ember export {path} -o model.ember`"
                if has_checkpoint else "pass the path of a .ember file made by `ember export`")
        raise InvalidArgumentError(f"'{path}' is a folder, not an .ember file; {hint}")
    if not os.path.exists(path):
        raise EmberIOError(f"no such file: '{path}'; pass the path of a .ember file made by `ember export`")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as error:
        raise EmberIOError(f"cannot read '{path}': {error.strerror or error}") from None
    if head.startswith(EMBER_MAGIC):
        return path
    kind = next((what for magic, what in _FOREIGN_MAGIC.items() if head.startswith(magic)), None)
    if kind is None and path.endswith(".safetensors"):
        kind = "a safetensors weights file"
    if kind is not None:
        source = (os.path.dirname(path) or ".") if path.endswith(".safetensors") else path
        raise InvalidProgramError(
            f"'{path}' is {kind}, not an .ember program; convert it with `ember export {source} -o model.ember` "
            "and pass the .ember file")
    raise InvalidProgramError(
        f"'{path}' is not an .ember program (it does not start with 'EMBR'); pass a file made by `ember export`")
