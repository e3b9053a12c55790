"""LLM files whose metadata sizes the runner's allocations (issue 12), and the runner's threads."""

from __future__ import annotations

from pathlib import Path

import pytest

import ember.runtime
from ember.runners import _runner
from ember.runtime.errors import InvalidProgramError, OutOfMemoryError
from tests.runtime import hostile


def _variant(tiny_path: Path, tmp_path: Path, key: str, value: int) -> str:
    out = tmp_path / "variant.ember"
    out.write_bytes(hostile.with_metadata(tiny_path.read_bytes(), key, value))
    return str(out)


def test_vocab_size_must_match_the_logits(tiny_path: Path, tmp_path: Path) -> None:
    # Once: llm.vocab_size = 2^27 made the sampler allocate 2 GiB.
    with pytest.raises(InvalidProgramError, match="llm.vocab_size is 134217728 but the method's logits output has"):
        _runner.Runner(_variant(tiny_path, tmp_path, "llm.vocab_size", 1 << 27))


def test_context_length_is_bounded_before_allocation(tiny_path: Path, tmp_path: Path) -> None:
    with pytest.raises(OutOfMemoryError, match="token history for llm.max_context_len"):
        _runner.Runner(_variant(tiny_path, tmp_path, "llm.max_context_len", 1 << 60))


def test_runner_and_runtime_agree_on_threads(tiny_path: Path) -> None:
    before = ember.runtime.get_num_threads()
    try:
        runner = _runner.Runner(str(tiny_path), 1)
        assert runner.num_threads == ember.runtime.get_num_threads() == 1
        cap = ember.runtime.max_num_threads()
        with pytest.warns(RuntimeWarning, match="threads=1000"):
            runner = _runner.Runner(str(tiny_path), 1000)
        assert runner.num_threads == ember.runtime.get_num_threads() == cap
        ember.runtime.set_num_threads(1)
        assert runner.num_threads == 1
    finally:
        ember.runtime.set_num_threads(before)
