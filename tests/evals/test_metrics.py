"""ember.evals.metrics against a direct torch computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.evals.metrics import Tally, kl_divergence, log_softmax, max_abs_error, percentile, token_nll, top1_agreement


def _logits(seed: int, rows: int = 300, vocab: int = 97, scale: float = 3.0) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, vocab, generator=g, dtype=torch.float64) * scale).float().numpy()


def test_log_softmax_and_nll_match_torch() -> None:
    logits = _logits(0)
    targets = np.random.default_rng(0).integers(0, logits.shape[1], size=logits.shape[0])
    t = torch.from_numpy(logits).double()
    np.testing.assert_allclose(log_softmax(logits), F.log_softmax(t, dim=-1).numpy(), rtol=1e-12, atol=1e-12)
    expected = F.cross_entropy(t, torch.from_numpy(targets), reduction="none").numpy()
    np.testing.assert_allclose(token_nll(logits, targets), expected, rtol=1e-12, atol=1e-12)  # 300 rows: 3 blocks


def test_kl_matches_torch_kl_div() -> None:
    ref, model = _logits(1), _logits(2)
    expected = F.kl_div(F.log_softmax(torch.from_numpy(model).double(), -1),
                        F.log_softmax(torch.from_numpy(ref).double(), -1),
                        log_target=True, reduction="none").sum(-1).numpy()  # KL(ref || model) per row
    got = kl_divergence(ref, model)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert (got > 0).all()
    np.testing.assert_allclose(kl_divergence(ref, ref), 0.0, atol=1e-12)
    # KL is not symmetric: the direction matters
    assert not np.allclose(kl_divergence(model, ref), got)


def test_kl_handles_impossible_tokens() -> None:
    ref = np.array([[0.0, -np.inf, 1.0]], dtype=np.float32)  # the reference never picks token 1
    model = np.array([[0.5, 2.0, 1.0]], dtype=np.float32)
    p = torch.softmax(torch.tensor([0.0, 1.0], dtype=torch.float64), 0)
    q = torch.softmax(torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64), 0)[[0, 2]]
    assert kl_divergence(ref, model)[0] == pytest.approx(float((p * (p.log() - q.log())).sum()), rel=1e-12)


def test_top1_p99_and_max_error_match_torch() -> None:
    ref, model = _logits(3), _logits(3) + _logits(4, scale=0.3)
    expected_top1 = (torch.from_numpy(ref).argmax(-1) == torch.from_numpy(model).argmax(-1)).numpy()
    np.testing.assert_array_equal(top1_agreement(ref, model), expected_top1)
    assert 0.5 < expected_top1.mean() < 1.0
    kl = kl_divergence(ref, model)
    assert percentile(kl, 99) == pytest.approx(float(torch.quantile(torch.from_numpy(kl), 0.99)), rel=1e-12)
    assert max_abs_error(ref, model) == pytest.approx(float((torch.from_numpy(ref).double() - torch.from_numpy(model).double()).abs().max()))


def test_tally_summary() -> None:
    ref, model = _logits(5), _logits(6)
    targets = np.random.default_rng(1).integers(0, ref.shape[1], size=ref.shape[0])
    tally = Tally()
    tally.add(model[:100], targets[:100], ref[:100])
    tally.add(model[100:], targets[100:], ref[100:])  # windows of different sizes weigh by token
    s = tally.summary()
    t_model, t_ref = torch.from_numpy(model).double(), torch.from_numpy(ref).double()
    nll = F.cross_entropy(t_model, torch.from_numpy(targets)).item()
    ref_nll = F.cross_entropy(t_ref, torch.from_numpy(targets)).item()
    assert tally.count == 300
    assert s["perplexity"] == pytest.approx(np.exp(nll), rel=1e-12)
    assert s["reference_perplexity"] == pytest.approx(np.exp(ref_nll), rel=1e-12)
    assert s["ppl_ratio"] == pytest.approx(np.exp(nll) / np.exp(ref_nll), rel=1e-12)
    kl = F.kl_div(F.log_softmax(t_model, -1), F.log_softmax(t_ref, -1), log_target=True, reduction="none").sum(-1)
    assert s["kl_mean"] == pytest.approx(kl.mean().item(), rel=1e-10)
    assert s["kl_p99"] == pytest.approx(torch.quantile(kl, 0.99).item(), rel=1e-10)
    assert s["top1"] == pytest.approx((t_ref.argmax(-1) == t_model.argmax(-1)).double().mean().item())
    only_file = Tally()
    only_file.add(model, targets)
    assert set(only_file.summary()) == {"nll", "perplexity"}
