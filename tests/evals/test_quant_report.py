"""evals/quant_report.py end to end on the tiny model: two recipes exported, evaluated against the
reference and timed, as JSON rows; --reuse keeps the files it finds."""

from __future__ import annotations

import json

from ember.evals import quant_report

from .conftest import CORPUS


def test_report_rows_for_two_recipes(tiny, tmp_path, capsys) -> None:
    out = tmp_path / "files"
    argv = [str(tiny.reference), "--recipes", "fp32,8w", "--text", str(CORPUS), "--tokens", "64", "--window", "32",
            "--gen-len", "4", "--repeats", "2", "--out", str(out), "--json"]
    assert quant_report.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["recipe"] for r in rows] == ["fp32", "8w"]
    fp32, w8 = rows
    assert fp32["ratio"] == 1.0 or abs(fp32["ratio"] - 1.0) < 1e-4  # the fp32 file is the reference
    assert w8["file_mb"] < fp32["file_mb"]  # int8 weights
    for r in rows:
        assert r["export_s"] > 0 and r["decode_min"] <= r["decode_tok_s"] <= r["decode_max"]
        assert 0.0 <= r["top1"] <= 1.0 and r["kl_mean"] >= 0.0
    assert sorted(p.name for p in out.iterdir()) == ["8w.ember", "fp32.ember"]

    assert quant_report.main(argv[:-1] + ["--reuse", "--json"]) == 0  # no export this time
    again = json.loads(capsys.readouterr().out)
    assert [r["export_s"] for r in again] == [None, None]
    assert [r["perplexity"] for r in again] == [r["perplexity"] for r in rows]
