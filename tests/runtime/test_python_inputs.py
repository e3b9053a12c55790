"""Python-side input checks of ember.runtime: rank-0 inputs keep rank 0; thread counts too big for C++ are refused in Python."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers import export, to_ember


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x * s + 1.0  # x [3], s [] -> [3]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return to_ember(export(Scale(), (torch.ones(3), torch.tensor(2.0))), tmp_path_factory.mktemp("rank0"))


@pytest.mark.parametrize("scalar", [np.array(3.0, dtype=np.float32), np.float32(3.0), torch.tensor(3.0)])
def test_rank0_input_runs(program, scalar) -> None:
    x = np.arange(3, dtype=np.float32)
    (out,) = program.run("forward", x, scalar)
    np.testing.assert_array_equal(out, x * 3.0 + 1.0)


def test_rank1_where_rank0_is_declared_is_still_refused(program) -> None:
    import ember.runtime

    with pytest.raises(ember.runtime.InvalidArgumentError):
        program.run("forward", np.arange(3, dtype=np.float32), np.array([3.0], dtype=np.float32))


@pytest.mark.parametrize("n", [2**40, 0, 1.5, True, "2"])
def test_set_num_threads_checks_the_value_in_python(n) -> None:
    import ember.runtime

    with pytest.raises(ember.runtime.InvalidArgumentError, match=r"threads must be an int in \[1, 2\*\*31\), got"):
        ember.runtime.set_num_threads(n)
