"""EvalResult: the numbers of one evaluation, as a dict, a table, and the file's eval.* metadata."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EvalResult"]


@dataclass(frozen=True)
class EvalResult:
    file: str
    corpus: str  # corpus name and sha256 prefix
    logits: str  # how the file was run: "all" (one call per chunk) or "last" (token by token)
    window: int  # tokens per window; windows are evaluated independently from position 0
    windows: int
    tokens: int  # tokens fed to the model: windows x window
    predicted: int  # tokens scored: windows x (window - 1)
    perplexity: float
    nll: float  # mean negative log-likelihood per predicted token (nats)
    seconds: float  # time running the file
    reference: str | None = None
    reference_perplexity: float | None = None
    ppl_ratio: float | None = None  # file perplexity / reference perplexity
    kl_mean: float | None = None  # KL(reference || file) per token, nats
    kl_p99: float | None = None
    kl_max: float | None = None
    top1: float | None = None  # fraction of positions whose argmax tokens agree
    max_logit_error: float | None = None  # largest |file logit - reference logit|
    reference_seconds: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    window_nll: tuple[float, ...] = ()  # mean NLL of each window, in order (its spread; a prefix's perplexity)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["tokens_per_s"] = self.tokens_per_s
        return d

    def metadata(self) -> dict[str, Any]:
        """The eval.* metadata `ember eval --record` writes into the file (no None values)."""
        md: dict[str, Any] = {
            "eval.perplexity": self.perplexity,
            "eval.tokens": self.tokens,
            "eval.window": self.window,
            "eval.corpus": self.corpus,
        }
        if self.reference is not None:
            md.update({
                "eval.reference": self.reference,
                "eval.reference_perplexity": self.reference_perplexity,
                "eval.ppl_ratio": self.ppl_ratio,
                "eval.kl_mean": self.kl_mean,
                "eval.kl_p99": self.kl_p99,
                "eval.top1": self.top1,
                "eval.max_logit_error": self.max_logit_error,
            })
        return {k: (float(v) if isinstance(v, float) else v) for k, v in md.items() if v is not None}

    def table(self) -> str:
        lines = [
            f"{self.file} on {self.corpus}",
            f"  {self.tokens} tokens in {self.windows} window(s) of {self.window} ({self.predicted} predicted); "
            f"logits: {self.logits}; {self.seconds:.1f} s ({self.tokens_per_s:.0f} tok/s)",
        ]
        rows: list[tuple[str, str, str]] = [("perplexity", _num(self.perplexity),
                                              _num(self.reference_perplexity) if self.reference else "")]
        if self.reference is not None:
            lines.append(f"  reference: {self.reference} (transformers, fp32, eager; {self.reference_seconds:.1f} s)")
            rows += [
                ("perplexity ratio", _num(self.ppl_ratio, 5), ""),
                ("KL mean (nats)", _num(self.kl_mean), ""),
                ("KL p99 (nats)", _num(self.kl_p99), ""),
                ("KL max (nats)", _num(self.kl_max), ""),
                ("top-1 agreement", f"{self.top1:.2%}" if self.top1 is not None else "-", ""),
                ("max |logit error|", _num(self.max_logit_error), ""),
            ]
        header = ("", "file", "reference") if self.reference is not None else ("", "file", "")
        width = max(len(r[0]) for r in rows)
        lines.append("")
        lines.append(f"  {header[0]:<{width}}  {header[1]:>12}  {header[2]:>12}".rstrip())
        for name, value, ref in rows:
            lines.append(f"  {name:<{width}}  {value:>12}  {ref:>12}".rstrip())
        return "\n".join(lines)


def _num(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}f}"
