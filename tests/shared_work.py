"""Work done once per test run even when pytest-xdist runs the tests in several worker processes
(`make test` runs `pytest -n auto`): a session fixture runs once per worker, so a build or an
export that every worker may need is done under a file lock in a folder the workers share, and
the workers after the first find it done."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this run sees: the workers' common base temp under xdist (each
    worker's own base temp is a subfolder of it), this session's base temp without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Holds an exclusive lock on `lock_file` (created if missing) across processes."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
