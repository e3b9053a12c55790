"""Fixtures shared by the runtime tests: the small program every corruption test starts from,
and the AddressSanitizer + UBSan build of tools/ember_run_file (built once per session)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.shared_work import exclusive

REPO = Path(__file__).resolve().parents[2]
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:allocator_may_return_null=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


class Block(torch.nn.Module):
    """Attention + MLP with a mutable buffer and a delegated linear: most loader paths in one file."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.proj = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        self.calls.add_(1)
        return x + self.proj(a.transpose(1, 2).reshape(b, t, 16)) * self.calls


@pytest.fixture(scope="session")
def program_bytes() -> bytes:
    from ember.backends.reference import ReferencePartitioner
    from ember.export import lower
    from tests.helpers import export

    torch.manual_seed(0)
    t = torch.export.Dim("t", min=1, max=8)
    ep = export(Block(), (torch.randn(1, 4, 16),), dynamic_shapes=({1: t},))
    prog = lower(ep, partitioners=(ReferencePartitioner(),), metadata={"test.name": "block", "test.blob": b"x" * 100})
    return prog.to_bytes()


@pytest.fixture(scope="session")
def asan_tool() -> Path:
    build = REPO / "build" / "asan"
    # -O1 -g1 (function names and lines, no variables): a third less compile time than -O2 -g (~150 s
    # on 2 cores), and the reports still name the line.
    # The build folder is shared by the xdist workers: the first builds, the others find it done.
    with exclusive(REPO / "build" / "asan.lock"):
        subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), "-DEMBER_ASAN=ON", "-DEMBER_PYTHON=OFF",
                        "-DEMBER_WERROR=ON", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1", f"-DPython_EXECUTABLE={sys.executable}"],
                       check=True, capture_output=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "ember_run_file", "-j", str(os.cpu_count() or 2)],
                       check=True, capture_output=True)
    return build / "ember_run_file"
