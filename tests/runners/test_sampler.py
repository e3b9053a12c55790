"""The sampler chain against a NumPy reference: exact post-chain probabilities, empirical
frequencies of seeded draws, reproducibility and what each penalty changes."""

from __future__ import annotations

import numpy as np
import pytest

from ember.runners import _runner
from ember.runtime.errors import InvalidArgumentError

from .sampler_reference import reference_probs

VOCAB = 50


def config(**kw) -> _runner.SamplerConfig:
    c = _runner.SamplerConfig()
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def logits(seed: int = 0, vocab: int = VOCAB) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(vocab) * 2.0).astype(np.float32)


HISTORY = [3, 7, 7, 7, 11, 3, 42, 2, 2, 49]
CASES = [
    dict(temperature=1.0),
    dict(temperature=0.5),
    dict(temperature=2.0),
    dict(temperature=1.0, top_k=5),
    dict(temperature=1.0, top_k=1),
    dict(temperature=0.8, top_p=0.5),
    dict(temperature=1.0, top_p=0.9),
    dict(temperature=1.0, min_p=0.1),
    dict(temperature=0.7, top_k=20, top_p=0.8, min_p=0.05),
    dict(temperature=1.0, repetition_penalty=1.5),
    dict(temperature=1.0, repetition_penalty=0.7),
    dict(temperature=1.0, frequency_penalty=0.8),
    dict(temperature=1.0, presence_penalty=1.2),
    dict(temperature=1.0, repetition_penalty=1.3, frequency_penalty=0.3, presence_penalty=0.5, penalty_window=4),
    dict(temperature=0.0),
    dict(temperature=0.0, repetition_penalty=5.0),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_probabilities_match_reference(case, seed) -> None:
    x = logits(seed)
    got = _runner.probabilities(x, config(**case), HISTORY)
    want = reference_probs(x, history=HISTORY, **case)
    np.testing.assert_allclose(got, want, atol=2e-6)
    assert abs(got.sum() - 1.0) < 1e-5


def test_top_p_on_a_large_vocabulary_grows_the_sorted_head() -> None:
    # Flat logits: top_p 0.95 needs far more than the first sorted block of 64 candidates.
    x = (np.random.default_rng(5).standard_normal(5000) * 0.1).astype(np.float32)
    got = _runner.probabilities(x, config(temperature=1.0, top_p=0.95))
    want = reference_probs(x, temperature=1.0, top_p=0.95)
    assert (got > 0).sum() == (want > 0).sum() > 1000
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("case", [dict(temperature=1.0), dict(temperature=0.7, top_k=8, top_p=0.9),
                                  dict(temperature=1.0, min_p=0.2, repetition_penalty=1.5)])
def test_draw_frequencies_match_the_distribution(case) -> None:
    x = logits(3)
    want = reference_probs(x, history=HISTORY, **case)
    n = 40000
    draws = _runner.sample_many(x, config(seed=123, **case), HISTORY, n)
    freq = np.bincount(draws, minlength=VOCAB) / n
    assert np.all(freq[want == 0] == 0), "a filtered token was drawn"
    # 4.5 standard errors per token.
    tol = 4.5 * np.sqrt(want * (1 - want) / n) + 1e-3
    assert np.all(np.abs(freq - want) <= tol), np.max(np.abs(freq - want) - tol)


def test_draws_across_seeds_match_the_distribution() -> None:
    x = logits(4, vocab=8)
    want = reference_probs(x, temperature=1.0)
    n = 6000
    draws = np.array([_runner.sample(x, config(temperature=1.0, seed=s)) for s in range(n)])
    freq = np.bincount(draws, minlength=8) / n
    assert np.all(np.abs(freq - want) <= 4.5 * np.sqrt(want * (1 - want) / n) + 1e-3)


def test_same_seed_same_tokens_different_seed_different_tokens() -> None:
    x = logits(6)
    a = _runner.sample_many(x, config(temperature=1.0, seed=7), [], 200)
    b = _runner.sample_many(x, config(temperature=1.0, seed=7), [], 200)
    c = _runner.sample_many(x, config(temperature=1.0, seed=8), [], 200)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_greedy_is_argmax_and_ignores_the_seed() -> None:
    x = logits(7)
    for seed in range(5):
        assert _runner.sample(x, config(temperature=0.0, seed=seed)) == int(np.argmax(x))


def _first_max(x: np.ndarray) -> int:
    """The greedy id: the first index of the largest value, NaN never chosen (np.argmax picks NaN)."""
    finite = np.where(np.isnan(x), -np.inf, x)
    return int(np.argmax(finite))


@pytest.mark.parametrize("n", [1, 7, 8, 15, 16, 17, 33, 49152])
def test_greedy_argmax_ties_nan_and_tails(n: int) -> None:
    """f32.argmax (a SIMD version per ISA level: lanes, then a scalar tail) against the first-max
    rule: ties go to the lowest id wherever they fall (lanes, tail), NaN is skipped, -inf never wins
    over a value, -0.0 ties with 0.0."""
    rng = np.random.default_rng(n)
    cases = [rng.standard_normal(n).astype(np.float32)]
    x = rng.integers(-3, 3, n).astype(np.float32)  # many ties
    cases.append(x)
    x = cases[0].copy()
    nan_at = rng.integers(0, n, max(1, n // 3))
    x[nan_at[nan_at != n // 2]] = np.nan  # one value stays
    cases.append(x)
    x = np.full(n, -np.inf, np.float32)
    x[n - 1] = -1e30  # the only value above -inf, in the tail or the last lane
    cases.append(x)
    x = np.zeros(n, np.float32)
    x[0] = -0.0
    cases.append(x)
    x = np.full(n, 5.0, np.float32)
    x[n // 2:] = 7.0  # the first 7 is mid-row
    cases.append(x)
    for x in cases:
        assert _runner.sample(x, config(temperature=0.0)) == _first_max(x), x[:40]


def test_greedy_with_nothing_above_minus_infinity_is_refused() -> None:
    for x in (np.full(40, np.nan, np.float32), np.full(40, -np.inf, np.float32)):
        with pytest.raises(InvalidArgumentError, match="NaN or -inf"):
            _runner.sample(x, config(temperature=0.0))


def test_a_tiny_temperature_over_large_logits_samples_the_top() -> None:
    """x / T would overflow to inf here (1e3 / 1e-36): the weights take the max off first,
    exp((x - max) / T), so the top token keeps weight 1 and the others 0."""
    x = logits(13) * 500.0
    for seed in range(4):
        assert _runner.sample(x, config(temperature=1e-36, seed=seed)) == int(np.argmax(x))
        assert _runner.sample(x, config(temperature=1e-36, top_p=0.5, seed=seed)) == int(np.argmax(x))


def test_denormal_temperatures_are_greedy() -> None:
    """1 / T overflows to inf below the smallest normal float: such temperatures sample greedily
    instead of always returning the last vocabulary id."""
    x = logits(11)
    for t in (1e-45, 3e-39, 1e-38):
        assert _runner.sample(x, config(temperature=t, seed=3)) == int(np.argmax(x))


def test_repetition_penalty_moves_greedy_off_a_repeated_token() -> None:
    x = np.zeros(VOCAB, dtype=np.float32)
    x[10], x[20] = 3.0, 2.0
    assert _runner.sample(x, config(repetition_penalty=2.0), [10]) == 20   # 3 / 2 < 2
    assert _runner.sample(x, config(repetition_penalty=2.0), [20]) == 10
    # Outside the window the penalty does not apply.
    assert _runner.sample(x, config(repetition_penalty=2.0, penalty_window=2), [10, 1, 2]) == 10
    # Negative logits are multiplied (pushed further down), never pulled up.
    y = np.full(VOCAB, -5.0, dtype=np.float32)
    y[1], y[2] = -1.0, -1.5
    assert _runner.sample(y, config(repetition_penalty=2.0), [1]) == 2


def test_frequency_counts_occurrences_presence_does_not() -> None:
    x = np.zeros(VOCAB, dtype=np.float32)
    p = _runner.probabilities(x, config(temperature=1.0, frequency_penalty=1.0), [4, 4, 4, 9])
    assert p[4] == pytest.approx(p[0] * np.exp(-3), rel=1e-5)
    assert p[9] == pytest.approx(p[0] * np.exp(-1), rel=1e-5)
    q = _runner.probabilities(x, config(temperature=1.0, presence_penalty=1.0), [4, 4, 4, 9])
    assert q[4] == pytest.approx(q[9]) and q[4] == pytest.approx(q[0] * np.exp(-1), rel=1e-5)


def test_invalid_settings_name_the_value() -> None:
    x = logits(0)
    for bad, match in [(dict(temperature=-1.0), "temperature"), (dict(top_p=0.0), "top_p"),
                       (dict(top_p=1.5), "top_p"), (dict(min_p=1.0), "min_p"), (dict(top_k=-2), "top_k"),
                       (dict(repetition_penalty=0.0), "repetition_penalty"), (dict(penalty_window=-1), "penalty_window")]:
        with pytest.raises(InvalidArgumentError, match=match):
            _runner.sample(x, config(**bad))


def test_all_nan_logits_are_an_error_not_a_crash() -> None:
    with pytest.raises(InvalidArgumentError, match="NaN"):
        _runner.sample(np.full(4, np.nan, dtype=np.float32), config(temperature=1.0))
