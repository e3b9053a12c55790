"""Regression tests for the hostile files of issue 12: each once crashed, read freed or null
memory, or exhausted memory; each must now be refused at load with a clean ember error.

The files are made through ember.export.Program (tests/runtime/hostile.py) from small valid
lowerings, so they follow the format exactly except for the one hostile detail.
"""

from __future__ import annotations

import numpy as np
import psutil
import pytest
import torch

import ember.runtime
from ember.backends.reference import ReferencePartitioner
from ember.export import lower
from ember.runtime.errors import InvalidArgumentError, InvalidProgramError, OutOfMemoryError
from tests.helpers import export
from tests.runtime import hostile


class ViewThenNeg(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(x.view(-1)).transpose(0, 0) + 1.0


class NegTranspose(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(x).transpose(0, 1) * 2.0


class Scalar(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(x)


class Stateful(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x * self.calls


class Delegated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + x


class WithWeight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(x) + self.w


def _bytes(module: torch.nn.Module, *args: torch.Tensor, **lower_kwargs: object) -> bytes:
    return lower(export(module, args), **lower_kwargs).to_bytes()


@pytest.fixture(scope="module")
def view_program() -> bytes:
    return _bytes(ViewThenNeg(), torch.randn(2, 3))


def _refused(data: bytes, match: str, error: type[Exception] = InvalidProgramError, *inputs: np.ndarray) -> None:
    with pytest.raises(error, match=match):
        prog = ember.runtime.load(data)
        prog.run("forward", *inputs)


def test_valid_sources_run(view_program: bytes) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = ember.runtime.load(view_program).run("forward", x)
    np.testing.assert_array_equal(y, 1.0 - x.reshape(-1))


def test_consumer_before_its_view_is_refused(view_program: bytes) -> None:
    # Once: the consumer read the alias left from the previous call, whose input was freed.
    _refused(hostile.consumer_before_view(view_program), "before any instruction produces it", InvalidProgramError,
             np.zeros((2, 3), np.float32))


def test_views_keep_no_pointer_across_calls(view_program: bytes) -> None:
    prog = ember.runtime.load(view_program)
    for k in range(3):
        x = np.full((2, 3), float(k), np.float32)
        (y,) = prog.run("forward", x)
        del x  # the next call must not see this buffer through a stale alias
        np.testing.assert_array_equal(y, np.full(6, 1.0 - k, np.float32))


def test_rank0_input_that_is_never_bound_is_refused() -> None:
    data = _bytes(Scalar(), torch.tensor(2.0))
    assert ember.runtime.load(data).run("forward", np.float32(2.0))[0] == -2.0
    _refused(hostile.unlisted_input(data), "not an input of method")


def test_rank0_alias_that_is_never_bound_is_refused() -> None:
    data = _bytes(Scalar(), torch.tensor(2.0))
    _refused(hostile.unbound_alias(data), "before any instruction produces it", InvalidProgramError, np.float32(1.0))


def test_misaligned_arena_offset_is_refused(view_program: bytes) -> None:
    _refused(hostile.misaligned_arena(view_program), "not aligned for float32")


def test_misaligned_constant_offset_is_refused() -> None:
    data = _bytes(WithWeight(), torch.randn(3, 4))
    _refused(hostile.misaligned_constant(data), "not aligned for float32")


def test_misaligned_input_is_copied_not_read_unaligned() -> None:
    data = _bytes(Scalar(), torch.tensor(2.0))
    raw = np.frombuffer(b"\0" + np.float32(3.0).tobytes(), dtype=np.float32, offset=1).reshape(())
    assert not raw.flags.aligned
    assert ember.runtime.load(data).run("forward", raw)[0] == -3.0


def test_overlapping_arena_slices_are_refused() -> None:
    data = _bytes(NegTranspose(), torch.randn(3, 5))
    # Once: memcpy with overlapping arguments in shape.cpp (UBSan), and wrong results.
    _refused(hostile.overlapping_copy(data), "overlap")


def test_arena_larger_than_its_values_is_refused(view_program: bytes) -> None:
    _refused(hostile.oversized_arena(view_program), "larger than the")


def test_nan_inputs_run_through_exp() -> None:
    data = _bytes(torch.nn.Softmax(dim=-1), torch.randn(2, 8))
    x = np.full((2, 8), np.nan, np.float32)
    x[1] = np.arange(8)
    (y,) = ember.runtime.load(data).run("forward", x)
    assert np.isnan(y[0]).all() and np.isclose(y[1].sum(), 1.0)


@pytest.fixture
def memory_limit():
    before = ember.runtime.get_memory_limit()
    yield ember.runtime.set_memory_limit
    ember.runtime.set_memory_limit(None)
    assert ember.runtime.get_memory_limit() == before


def test_huge_state_is_bounded_and_never_touched(memory_limit) -> None:  # noqa: ANN001
    data = hostile.huge_state(_bytes(Stateful(), torch.randn(4)))
    assert len(data) < 64 * 1024  # a small file declaring 2 GiB of state
    memory_limit(1 << 30)
    with pytest.raises(OutOfMemoryError, match="program state .* above the memory limit of 1073741824"):
        ember.runtime.load(data)
    memory_limit(None)
    if ember.runtime.get_memory_limit() < (3 << 30):
        pytest.skip("this machine's memory is below the 2 GiB the file declares")
    rss = psutil.Process().memory_info().rss
    prog = ember.runtime.load(data)  # allowed by the default limit: the zero state stays lazy
    assert psutil.Process().memory_info().rss - rss < (256 << 20)
    with pytest.raises(InvalidProgramError, match="does not match the dtype/size of state"):
        prog.run("forward", np.zeros(4, np.float32))


def test_delegate_operand_none_is_refused() -> None:
    data = _bytes(Delegated(), torch.randn(2, 4), partitioners=(ReferencePartitioner(),))
    assert ember.runtime.load(data).run("forward", np.ones((2, 4), np.float32))[0].shape == (2, 4)
    _refused(hostile.delegate_operand_none(data), "only linear's bias may be")


def test_delegate_value_of_2_pow_32_elements_is_bounded(memory_limit) -> None:  # noqa: ANN001
    data = _bytes(Delegated(), torch.randn(2, 4), partitioners=(ReferencePartitioner(),))
    memory_limit(1 << 30)
    _refused(hostile.delegate_huge_value(data), r"intermediate values needs 171798692\d\d bytes, above the memory limit", OutOfMemoryError)


def test_memory_limit_is_validated() -> None:
    for bad in (0, -1, 2**64, 1.5, True):
        with pytest.raises(InvalidArgumentError, match="memory limit"):
            ember.runtime.set_memory_limit(bad)


# Byte runs Python's strict UTF-8 decoder refuses: a lone continuation byte, an overlong '/', a
# surrogate (U+D800), a sequence cut short, 0xFF.
NOT_UTF8 = [b"\xac", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xff"]


@pytest.mark.parametrize("bad", NOT_UTF8, ids=lambda b: b.hex())
def test_strings_that_are_not_utf8_are_refused(bad: bytes) -> None:
    # Once: the names reached Python as bytes it could not decode (a UnicodeDecodeError).
    text = "valid é and 🙂 text"
    data = _bytes(Scalar(), torch.tensor(2.0), metadata={"test.key": text})
    prog = ember.runtime.load(data)
    assert prog.methods == ["forward"] and prog.metadata["test.key"] == text
    for old, where in ((b"forward", "the name of method 0"), (b"test.key", "the key of metadata entry"),
                       (text.encode(), "the value of metadata entry")):
        assert data.count(old) == 1
        _refused(data.replace(old, bad + old[len(bad):]), f"{where}.* is not valid UTF-8")
