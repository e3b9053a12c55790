"""Rank-0 (0-d) inputs reach a method as rank 0, from numpy scalars, 0-d arrays and Python floats."""

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
