"""The kernels' AVX2 and portable paths, forced with EMBER_KERNEL_ISA (the ISA is chosen once per
process, so each path runs the math-heavy kernel tests in a subprocess of its own)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("isa", ["portable", "avx2"])
def test_kernels_on_forced_isa(isa: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "tests/runtime/test_kernels.py"),
         str(REPO / "tests/runtime/test_quantized_kernels.py"),
         "-k", "linear or attend or sdpa or softmax or silu or norm or matmul or quantized"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "EMBER_KERNEL_ISA": isa}, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
