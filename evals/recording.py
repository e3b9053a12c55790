"""Writes eval results into a .ember file's metadata (eval.*), replacing the file safely.

The whole file is rewritten (the flatbuffer holds the metadata table), into a temporary file in the
same folder that is verified with the runtime before it atomically replaces the original: a failure
at any point leaves the original untouched.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from typing import Any

from ember.evals.errors import EvalError
from ember.evals.result import EvalResult

__all__ = ["record", "update_metadata", "EVAL_PREFIX"]

EVAL_PREFIX = "eval."


def update_metadata(path: str | os.PathLike[str], updates: Mapping[str, Any], remove_prefix: str | None = None) -> None:
    """Sets `updates` in the file's metadata, first dropping every key that starts with
    `remove_prefix` (so stale results of an earlier run do not survive). Values: int, float, bool, str
    or a list of ints."""
    from ember.export.program import Program, SegmentTable, _seq, encode_metadata

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise EvalError(f"no such file: '{path}'")
    for key, value in updates.items():
        if isinstance(value, (bytes, bytearray, memoryview)):
            raise EvalError(f"metadata '{key}': bytes values cannot be recorded after export")
    program = Program.load(path)
    new_entries = encode_metadata(dict(updates), SegmentTable())
    kept = [e for e in _seq(program.root.metadata)
            if not (remove_prefix and _key(e).startswith(remove_prefix)) and _key(e) not in updates]
    program.root.metadata = sorted(kept + new_entries, key=_key)
    expected = program.metadata

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            program.write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        _verify(tmp, expected)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _key(entry: Any) -> str:
    key = entry.key
    return key.decode() if isinstance(key, bytes) else str(key)


def _verify(path: str, expected: Mapping[str, Any]) -> None:
    """The runtime loads the rewritten file and reads back the same metadata."""
    import ember.runtime

    got = ember.runtime.load(path).metadata
    if set(got) != set(expected):
        raise EvalError(f"the rewritten file's metadata keys differ: {sorted(set(got) ^ set(expected))}")
    for key, value in expected.items():
        same = got[key] == value if not isinstance(value, float) else abs(got[key] - value) <= 1e-12 * max(1.0, abs(value))
        if not same:
            raise EvalError(f"the rewritten file reads back metadata '{key}' as {got[key]!r}, not {value!r}")


def record(file: str | os.PathLike[str], result: EvalResult) -> dict[str, Any]:
    """Stores `result` in the file's eval.* metadata (replacing earlier eval.* entries); returns what
    was written. `ember inspect FILE` shows it."""
    import time

    md = result.metadata()
    md["eval.logits"] = result.logits
    md["eval.time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    update_metadata(file, md, remove_prefix=EVAL_PREFIX)
    return md
