"""Server counters in the Prometheus text format (GET /metrics). Updated on the event loop only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Metrics"]

# Time-to-first-token histogram buckets, in seconds.
_TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class Metrics:
    requests: Counter = field(default_factory=Counter)   # (endpoint, status) -> count
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_tokens: int = 0
    decode_seconds: float = 0.0
    decode_batch_sum: float = 0.0  # over decode steps: how many sessions shared the step
    ttft_buckets: list[int] = field(default_factory=lambda: [0] * len(_TTFT_BUCKETS))
    ttft_count: int = 0
    ttft_sum: float = 0.0
    cancelled: int = 0

    def request(self, endpoint: str, status: int) -> None:
        self.requests[(endpoint, status)] += 1

    def time_to_first_token(self, seconds: float) -> None:
        self.ttft_count += 1
        self.ttft_sum += seconds
        for i, bound in enumerate(_TTFT_BUCKETS):
            if seconds <= bound:
                self.ttft_buckets[i] += 1

    def generation(self, stats: object, prompt_tokens: int) -> None:
        """Adds one finished generation (a GenerationStats)."""
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += int(stats.generated_tokens)
        self.prefill_tokens += int(stats.prefill_tokens)
        self.prefill_seconds += float(stats.prefill_ms) / 1e3
        self.decode_tokens += int(stats.decode_steps)
        self.decode_seconds += float(stats.decode_ms) / 1e3
        self.decode_batch_sum += int(stats.decode_steps) * float(stats.decode_batch_mean)

    def render(self, gauges: dict[str, tuple[str, Callable[[], float]]]) -> str:
        """The exposition text; `gauges` maps a name to (help, read the current value)."""
        out: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            out.append(f"# HELP ember_{name} {help_text}")
            out.append(f"# TYPE ember_{name} {kind}")
            for labels, value in samples:
                out.append(f"ember_{name}{labels} {value:g}" if isinstance(value, float) else f"ember_{name}{labels} {value}")

        metric("requests_total", "counter", "HTTP requests answered, by endpoint and status code.",
               [(f'{{endpoint="{e}",status="{s}"}}', n) for (e, s), n in sorted(self.requests.items())])
        metric("requests_cancelled_total", "counter", "Generations stopped because the client went away.",
               [("", self.cancelled)])
        metric("prompt_tokens_total", "counter", "Prompt tokens of finished generations.", [("", self.prompt_tokens)])
        metric("completion_tokens_total", "counter", "Generated tokens.", [("", self.completion_tokens)])
        metric("prefill_tokens_total", "counter", "Prompt tokens computed (cached prefixes excluded).",
               [("", self.prefill_tokens)])
        metric("prefill_seconds_total", "counter", "Seconds spent in prefill.", [("", self.prefill_seconds)])
        metric("decode_tokens_total", "counter", "Decode steps.", [("", self.decode_tokens)])
        metric("decode_seconds_total", "counter", "Seconds spent in decode steps.", [("", self.decode_seconds)])
        metric("decode_batch_mean", "gauge",
               "Sessions sharing a decode step (one pass over the weights), on average over all requests so far.",
               [("", self.decode_batch_sum / self.decode_tokens if self.decode_tokens else 0.0)])
        metric("prefill_tokens_per_second", "gauge", "Prefill throughput over all requests so far.",
               [("", self.prefill_tokens / self.prefill_seconds if self.prefill_seconds else 0.0)])
        metric("decode_tokens_per_second", "gauge", "Decode throughput per session over all requests so far.",
               [("", self.decode_tokens / self.decode_seconds if self.decode_seconds else 0.0)])
        for name, (help_text, read) in gauges.items():
            metric(name, "gauge", help_text, [("", read())])
        out.append("# HELP ember_time_to_first_token_seconds From request arrival to the first generated text.")
        out.append("# TYPE ember_time_to_first_token_seconds histogram")
        for bound, n in zip(_TTFT_BUCKETS, self.ttft_buckets):
            out.append(f'ember_time_to_first_token_seconds_bucket{{le="{bound:g}"}} {n}')
        out.append(f'ember_time_to_first_token_seconds_bucket{{le="+Inf"}} {self.ttft_count}')
        out.append(f"ember_time_to_first_token_seconds_sum {self.ttft_sum:g}")
        out.append(f"ember_time_to_first_token_seconds_count {self.ttft_count}")
        return "\n".join(out) + "\n"
