"""ember.evals.evaluate on tiny files: perplexity equals transformers' on the same ids, with a
logits="all" file and a logits="last" one (token by token); reference metrics; clear errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.evals import Corpus, EvalError, FileModel, evaluate

from .conftest import CONTEXT, CORPUS

TOKENS = 256  # 4 windows of 64


def _hf_perplexity(model, tokenizer, window: int, n_windows: int) -> float:
    """Windows of BOS + window-1 corpus tokens, each from position 0, computed directly in transformers."""
    text = CORPUS.read_text(encoding="utf-8")[:20_000]
    ids = tokenizer(text, add_special_tokens=False).input_ids
    per = window - 1
    nlls = []
    with torch.no_grad():
        for w in range(n_windows):
            win = torch.tensor([[tokenizer.bos_token_id] + ids[w * per:(w + 1) * per]])
            logits = model(input_ids=win, use_cache=False).logits[0].double()  # [window, V]
            nlls.append(F.cross_entropy(logits[:-1], win[0, 1:], reduction="none"))
    return math.exp(torch.cat(nlls).mean().item())


@pytest.mark.parametrize("mode", ["all", "last"])
def test_perplexity_matches_transformers(tiny, mode: str) -> None:
    path = getattr(tiny, mode)
    result = evaluate(path, CORPUS, tokens=TOKENS, progress=False)
    assert result.window == CONTEXT  # default: min(512, llm.max_context_len)
    assert (result.windows, result.tokens, result.predicted) == (4, 256, 4 * 63)
    assert result.logits == mode
    expected = _hf_perplexity(tiny.model, tiny.tokenizer, CONTEXT, 4)
    assert result.perplexity == pytest.approx(expected, rel=1e-4)
    # per window, in order: the first window's alone is what 64 tokens give
    assert len(result.window_nll) == 4 and len(set(result.window_nll)) == 4
    assert math.exp(sum(result.window_nll) / 4) == pytest.approx(result.perplexity, rel=1e-9)
    assert math.exp(result.window_nll[0]) == pytest.approx(_hf_perplexity(tiny.model, tiny.tokenizer, CONTEXT, 1),
                                                           rel=1e-4)
    assert result.reference is None and result.kl_mean is None
    assert any("token by token" in n for n in result.notes) == (mode == "last")


def test_reference_metrics_of_an_exact_export(tiny) -> None:
    result = evaluate(tiny.all, CORPUS, reference=tiny.reference, tokens=128, window=32, progress=False)
    assert (result.windows, result.window, result.predicted) == (4, 32, 4 * 31)
    assert result.reference == "reference"
    assert result.reference_perplexity == pytest.approx(_hf_perplexity(tiny.model, tiny.tokenizer, 32, 4), rel=1e-9)
    assert result.ppl_ratio == pytest.approx(1.0, abs=1e-4)
    assert result.top1 == 1.0
    assert 0 <= result.kl_mean < 1e-8 and 0 <= result.kl_p99 < 1e-7
    assert result.max_logit_error < 1e-3
    table = result.table()
    for label in ("perplexity ratio", "KL mean", "KL p99", "top-1 agreement", "max |logit error|", "reference"):
        assert label in table


def test_reference_detects_a_different_model(tiny) -> None:
    from ..llm.tiny_models import make_tiny_model

    other, _ = make_tiny_model("llama", seed=1)
    result = evaluate(tiny.last, CORPUS, reference=other, tokens=64, progress=False)
    assert result.kl_mean > 0.01 and result.top1 < 0.9 and abs(result.ppl_ratio - 1) > 1e-3


def test_file_model_positions_and_prefix_reuse(tiny) -> None:
    """logits(ids, start) rows equal the full run's rows, in both modes, whether or not the cache is
    reused (a shared prefix, a shorter sequence, a diverging one)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(3, 384, (40,), generator=g).tolist()
    b = a[:25] + torch.randint(3, 384, (10,), generator=g).tolist()
    with torch.no_grad():
        want = {k: tiny.model(input_ids=torch.tensor([s])).logits[0].numpy() for k, s in (("a", a), ("b", b))}
    for path in (tiny.all, tiny.last):
        m = FileModel(path)
        np.testing.assert_allclose(m.logits(a), want["a"], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(m.logits(b, start=30), want["b"][30:], rtol=1e-4, atol=1e-4)  # reuses 25
        np.testing.assert_allclose(m.logits(b[:20], start=19), want["b"][19:20], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(m.logits(a, start=5), want["a"][5:], rtol=1e-4, atol=1e-4)
        m.reset()
        np.testing.assert_allclose(m.logits(a, start=39), want["a"][39:], rtol=1e-4, atol=1e-4)


def test_a_window_larger_than_the_context_is_refused(tiny) -> None:
    with pytest.raises(EvalError, match=r"window 65 is larger than the file's context \(llm.max_context_len = 64\)"):
        evaluate(tiny.all, CORPUS, tokens=256, window=65, progress=False)
    with pytest.raises(EvalError, match="window must be an int >= 2"):
        evaluate(tiny.all, CORPUS, window=1, progress=False)


def test_fewer_tokens_than_one_window_is_refused(tiny) -> None:
    with pytest.raises(EvalError, match=r"tokens \(32\) is smaller than one window \(64\)"):
        evaluate(tiny.all, CORPUS, tokens=32, progress=False)


def test_missing_or_short_corpus_is_refused(tiny, tmp_path) -> None:
    with pytest.raises(EvalError, match="corpus file not found: .*nope.txt"):
        evaluate(tiny.all, tmp_path / "nope.txt", progress=False)
    with pytest.raises(EvalError, match="fewer than one window of 64"):
        evaluate(tiny.all, Corpus.from_text("Too short a text."), tokens=64, progress=False)
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(EvalError, match="is empty"):
        evaluate(tiny.all, tmp_path / "empty.txt", progress=False)


def test_missing_file_and_bad_reference_are_refused(tiny, tmp_path) -> None:
    with pytest.raises(EvalError, match="no such file"):
        evaluate(tmp_path / "missing.ember", CORPUS, progress=False)
    with pytest.raises(EvalError, match="reference: .*does not exist"):
        evaluate(tiny.all, CORPUS, reference=tmp_path / "no_model", tokens=64, progress=False)


def test_the_corpus_defaults_to_the_bundled_book(tiny) -> None:
    result = evaluate(tiny.all, tokens=64, progress=False)
    assert result.corpus.startswith("pride_and_prejudice.txt (sha256 ")


def test_the_file_side_never_imports_torch(tiny) -> None:
    import subprocess
    import sys

    code = ("import sys, ember.evals\n"
            "assert 'torch' not in sys.modules\n"
            f"r = ember.evals.evaluate({str(tiny.last)!r}, tokens=64, progress=False)\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch was imported'\n"
            "print(r.perplexity)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip()) > 1.0
