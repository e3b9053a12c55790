"""Smoke test of evals/bench_peers.py: it runs end to end with llama.cpp absent (its rows say so
instead of failing), on an existing SmolLM2 file, and its JSON carries the bandwidth probes: the 1 GiB
read, and per measured row a re-read of a buffer of its file's size (none for a row that did not run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Runs the script with llama_cpp made unimportable, whether or not it is installed here.
_WITHOUT_LLAMA = ("import runpy, sys; sys.modules['llama_cpp'] = None; sys.argv = ['bench_peers.py'] + sys.argv[1:]; "
                  f"runpy.run_path({str(ROOT / 'evals' / 'bench_peers.py')!r}, run_name='__main__')")


@pytest.mark.slow
def test_bench_peers_runs_without_llama_cpp(smollm2_export, tmp_path: Path) -> None:
    path, _ = smollm2_export
    args = ["--ember", str(path), "--llama", "q4_0", "--repeats", "1", "--prompt-len", "8", "--gen-len", "4",
            "--work-dir", str(tmp_path)]
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_LLAMA, *args, "--json"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    ember_row = result["rows"][f"ember {path.stem}"]
    assert ember_row["decode_tokens_per_s"]["median"] > 0 and ember_row["prefill_tokens_per_s"]["median"] > 0
    assert "llama_cpp not installed" in result["rows"]["llama.cpp q4_0"]["note"]
    assert result["read_bandwidth_gbs"] > 0
    assert ember_row["reread_bandwidth_gbs"] > 0
    assert result["rows"]["llama.cpp q4_0"]["reread_bandwidth_gbs"] is None
    table = subprocess.run([sys.executable, "-c", _WITHOUT_LLAMA, *args], capture_output=True, text=True,
                           timeout=600, cwd=ROOT)
    assert table.returncode == 0 and "llama.cpp q4_0" in table.stdout and "not installed" in table.stdout
    assert "of re-read" in table.stdout
