"""`ember eval`: JSON output, --record into the file's eval.* metadata (shown by `ember inspect`),
a safe rewrite of the file, and clear errors for bad inputs."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import ember.runtime
from ember.cli import main
from ember.evals import EvalResult, record

from .conftest import CORPUS

EXPECTED_KEYS = {
    "file", "corpus", "logits", "window", "windows", "tokens", "predicted", "perplexity", "nll", "seconds",
    "tokens_per_s", "reference", "reference_perplexity", "ppl_ratio", "kl_mean", "kl_p99", "kl_max", "top1",
    "max_logit_error", "reference_seconds", "notes", "window_nll",
}


def _eval_json(capsys, *argv: str) -> dict:
    assert main(["eval", *argv, "--json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_output_has_the_expected_keys(tiny, capsys) -> None:
    out = _eval_json(capsys, str(tiny.all), "--text", str(CORPUS), "--tokens", "128",
                     "--reference", str(tiny.reference))
    assert set(out) == EXPECTED_KEYS
    assert out["tokens"] == 128 and out["window"] == 64 and out["windows"] == 2 and out["logits"] == "all"
    assert len(out["window_nll"]) == 2
    assert out["ppl_ratio"] == pytest.approx(1.0, abs=1e-4) and out["top1"] == 1.0
    assert out["corpus"].startswith("pride_and_prejudice.txt (sha256 ")
    no_ref = _eval_json(capsys, str(tiny.all), "--tokens", "64", "--window", "32")
    assert set(no_ref) == EXPECTED_KEYS and no_ref["reference"] is None and no_ref["kl_mean"] is None


def test_table_output_and_last_logits_note(tiny, capsys) -> None:
    assert main(["eval", str(tiny.last), "--tokens", "64", "-q"]) == 0
    captured = capsys.readouterr()
    assert "perplexity" in captured.out and "64 tokens in 1 window(s) of 64" in captured.out
    assert "--logits all" in captured.err


def test_record_then_inspect_shows_eval(tiny, tmp_path, capsys) -> None:
    path = tmp_path / "model.ember"
    shutil.copy(tiny.all, path)
    before = ember.runtime.load(path).metadata
    tokens = np.asarray([[1, 40, 50, 60]], dtype=np.int64)
    logits_before = ember.runtime.load(path).run("forward", tokens, np.zeros(1, np.int64))[0]

    assert main(["eval", str(path), "--tokens", "128", "--reference", str(tiny.reference), "--record", "-q"]) == 0
    capsys.readouterr()
    after = ember.runtime.load(path).metadata
    evals = {k: v for k, v in after.items() if k.startswith("eval.")}
    assert {k: v for k, v in after.items() if not k.startswith("eval.")} == before  # nothing else changed
    assert evals["eval.tokens"] == 128 and evals["eval.window"] == 64
    assert evals["eval.ppl_ratio"] == pytest.approx(1.0, abs=1e-4) and evals["eval.top1"] == 1.0
    assert evals["eval.corpus"].startswith("pride_and_prejudice.txt (sha256 ")
    assert evals["eval.reference"] == "reference" and evals["eval.logits"] == "all"
    for key in ("eval.perplexity", "eval.reference_perplexity", "eval.kl_mean", "eval.kl_p99", "eval.max_logit_error",
                "eval.time"):
        assert key in evals
    logits_after = ember.runtime.load(path).run("forward", tokens, np.zeros(1, np.int64))[0]
    np.testing.assert_array_equal(logits_after, logits_before)  # the program still runs, unchanged

    assert main(["inspect", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "eval (recorded by `ember eval --record`):" in shown
    section = shown.split("eval (recorded by `ember eval --record`):")[1]
    assert "  ppl_ratio" in section and "  top1" in section and "  corpus" in section
    assert "eval.ppl_ratio =" not in shown  # not repeated in the raw metadata list

    # A second record without a reference replaces the eval.* set: no stale reference numbers survive.
    assert main(["eval", str(path), "--tokens", "64", "--record", "-q"]) == 0
    again = ember.runtime.load(path).metadata
    assert again["eval.tokens"] == 64 and "eval.ppl_ratio" not in again and "eval.reference" not in again
    assert sorted(os.listdir(tmp_path)) == ["model.ember"]  # no temporary files left behind


def test_a_failed_record_leaves_the_file_untouched(tiny, tmp_path, monkeypatch) -> None:
    import ember.evals.recording as record_module

    path = tmp_path / "model.ember"
    shutil.copy(tiny.all, path)
    original = path.read_bytes()
    result = EvalResult(file=str(path), corpus="c", logits="all", window=64, windows=1, tokens=64, predicted=63,
                        perplexity=12.5, nll=2.5, seconds=1.0)

    def broken(tmp: str, expected) -> None:
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(record_module, "_verify", broken)
    with pytest.raises(OSError, match="simulated"):
        record(path, result)
    assert path.read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["model.ember"]


def test_record_api_returns_what_it_wrote(tiny, tmp_path) -> None:
    path = tmp_path / "model.ember"
    shutil.copy(tiny.all, path)
    os.chmod(path, 0o640)
    result = EvalResult(file=str(path), corpus="c (sha256 0)", logits="all", window=64, windows=1, tokens=64,
                        predicted=63, perplexity=12.5, nll=2.5, seconds=1.0)
    written = record(path, result)
    md = ember.runtime.load(path).metadata
    assert {k: md[k] for k in written} == written
    assert written["eval.perplexity"] == 12.5 and "eval.kl_mean" not in written
    assert os.stat(path).st_mode & 0o777 == 0o640


@pytest.mark.parametrize("argv, message", [
    (["--text", "{tmp}/missing.txt"], "corpus file not found: '{tmp}/missing.txt'"),
    (["--tokens", "10"], "tokens (10) is smaller than one window (64)"),
    (["--window", "128"], "window 128 is larger than the file's context (llm.max_context_len = 64)"),
    (["--reference", "{tmp}/nothing"], "does not exist"),
])
def test_bad_inputs_exit_1_with_a_clear_message(tiny, tmp_path, capsys, argv, message) -> None:
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(["eval", str(tiny.all), *argv, "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ember eval: ") and message.format(tmp=tmp_path) in err


def test_missing_file_exits_1(tmp_path, capsys) -> None:
    assert main(["eval", str(tmp_path / "nope.ember"), "-q"]) == 1
    assert "no such file" in capsys.readouterr().err


def test_a_failed_record_exits_1_and_says_the_file_is_unchanged(tiny, tmp_path, monkeypatch, capsys) -> None:
    import ember.evals.recording as record_module

    path = tmp_path / "model.ember"
    shutil.copy(tiny.all, path)
    original = path.read_bytes()

    def broken(tmp: str, expected) -> None:
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(record_module, "_verify", broken)
    assert main(["eval", str(path), "--tokens", "64", "--record", "-q"]) == 1
    captured = capsys.readouterr()
    assert "could not record the results" in captured.err and "unchanged" in captured.err
    assert "perplexity" in captured.out  # the numbers are not lost
    assert path.read_bytes() == original
