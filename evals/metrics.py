"""Per-token quality metrics of a model's logits against targets and against a reference's logits.

All in numpy float64 (no torch): negative log-likelihood, KL(ref || model), top-1 agreement, the
largest absolute logit error, and a tally that accumulates them over windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["log_softmax", "token_nll", "kl_divergence", "top1_agreement", "max_abs_error", "percentile", "Tally"]

_ROWS = 128  # rows per block: keeps the float64 temporaries of a [T, 49152] window small


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 [..., V] log-probabilities of `logits` [..., V]."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """[T]: -log p(targets[t] | logits[t]) for logits [T, V], targets int [T]."""
    targets = np.asarray(targets, dtype=np.int64)
    out = np.empty(len(targets), dtype=np.float64)
    for s in range(0, len(targets), _ROWS):
        lp = log_softmax(logits[s:s + _ROWS])  # [b, V]
        out[s:s + _ROWS] = -lp[np.arange(lp.shape[0]), targets[s:s + _ROWS]]
    return out


def kl_divergence(ref_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """[T]: KL(ref || model) = sum_v p_ref(v) (log p_ref(v) - log p_model(v)) at each position."""
    out = np.empty(ref_logits.shape[0], dtype=np.float64)
    for s in range(0, ref_logits.shape[0], _ROWS):
        lr = log_softmax(ref_logits[s:s + _ROWS])  # [b, V]
        lm = log_softmax(logits[s:s + _ROWS])  # [b, V]
        p = np.exp(lr)
        with np.errstate(invalid="ignore"):  # 0 * (-inf - x): a token the reference never picks counts 0
            out[s:s + _ROWS] = np.where(p > 0, p * (lr - lm), 0.0).sum(axis=-1)
    return out


def top1_agreement(ref_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """bool [T]: the two argmaxes are the same token."""
    return np.argmax(ref_logits, axis=-1) == np.argmax(logits, axis=-1)


def max_abs_error(ref_logits: np.ndarray, logits: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(logits, np.float64) - np.asarray(ref_logits, np.float64))))


def percentile(values: np.ndarray, q: float) -> float:
    """Linear interpolation between closest ranks (numpy's and torch.quantile's default)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


@dataclass
class Tally:
    """Accumulates per-token values over windows."""

    nll: list[np.ndarray] = field(default_factory=list)
    ref_nll: list[np.ndarray] = field(default_factory=list)
    kl: list[np.ndarray] = field(default_factory=list)
    top1: list[np.ndarray] = field(default_factory=list)
    max_error: float = 0.0

    def add(self, logits: np.ndarray, targets: np.ndarray, ref_logits: np.ndarray | None = None) -> None:
        """logits, ref_logits [T, V] predicting targets [T]."""
        self.nll.append(token_nll(logits, targets))
        if ref_logits is not None:
            self.ref_nll.append(token_nll(ref_logits, targets))
            self.kl.append(kl_divergence(ref_logits, logits))
            self.top1.append(top1_agreement(ref_logits, logits))
            self.max_error = max(self.max_error, max_abs_error(ref_logits, logits))

    @property
    def count(self) -> int:
        return int(sum(len(x) for x in self.nll))

    def summary(self) -> dict[str, float]:
        nll = float(np.concatenate(self.nll).mean())
        out = {"nll": nll, "perplexity": float(np.exp(nll))}
        if self.kl:
            ref_nll = float(np.concatenate(self.ref_nll).mean())
            kl = np.concatenate(self.kl)
            out.update(
                reference_nll=ref_nll,
                reference_perplexity=float(np.exp(ref_nll)),
                ppl_ratio=float(np.exp(nll - ref_nll)),
                kl_mean=float(kl.mean()),
                kl_p99=percentile(kl, 99.0),
                kl_max=float(kl.max()),
                top1=float(np.concatenate(self.top1).mean()),
                max_logit_error=self.max_error,
            )
        return out
