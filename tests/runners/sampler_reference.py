"""A NumPy reference of ember's sampler chain (runners/include/ember/runners/sampler.h)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np


def reference_probs(
    logits: np.ndarray,
    *,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    repetition_penalty: float = 1.0,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    penalty_window: int = 64,
    history: Sequence[int] = (),
) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64).copy()
    vocab = x.shape[0]
    window = list(history) if penalty_window == 0 else list(history)[-penalty_window:]
    for token, count in Counter(t for t in window if 0 <= t < vocab).items():
        v = x[token]
        if repetition_penalty != 1.0:
            v = v / repetition_penalty if v > 0 else v * repetition_penalty
        x[token] = v - frequency_penalty * count - presence_penalty
    probs = np.zeros(vocab)
    if temperature == 0.0:
        probs[int(np.argmax(x))] = 1.0
        return probs
    w = np.exp((x - x.max()) / temperature)
    order = np.argsort(-w, kind="stable")
    keep = order[:top_k] if 0 < top_k < vocab else order
    if top_p < 1.0:
        total = w[keep].sum()
        cum, n = 0.0, 0
        while n < len(keep) and cum < top_p * total:
            cum += w[keep[n]]
            n += 1
        keep = keep[: max(n, 1)]
    if min_p > 0.0:
        keep = keep[w[keep] >= min_p * w.max()]
    probs[keep] = w[keep] / w[keep].sum()
    return probs
