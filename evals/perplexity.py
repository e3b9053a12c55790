"""`evaluate`: perplexity of a .ember file over fixed windows of a corpus, optionally against the
transformers reference (KL, top-1 agreement, logit error on the same token ids)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from ember.evals.corpus import BUNDLED_CORPUS, DEFAULT_TOKENS, Corpus, corpus_windows
from ember.evals.errors import EvalError
from ember.evals.file_model import FileModel
from ember.evals.metrics import Tally
from ember.evals.result import EvalResult
from ember.llm.config import LogitsMode

__all__ = ["evaluate"]

LAST_LOGITS_NOTE = (
    "the file was exported with logits='last' (for generation), so it was evaluated token by token; "
    "export with `ember export --logits all` (export_llm(..., logits='all')) for a faster eval")


def evaluate(
    file: str | os.PathLike[str],
    text: str | os.PathLike[str] | Corpus | None = None,
    reference: Any = None,
    tokens: int = DEFAULT_TOKENS,
    window: int | None = None,
    progress: bool = True,
    threads: int | None = None,
    mmap: bool = False,
) -> EvalResult:
    """Perplexity of `file` over the first `tokens` tokens of `text` (a path, or a Corpus; default:
    the bundled Pride and Prejudice) in non-overlapping windows of `window` tokens (default
    min(512, llm.max_context_len)), each evaluated from position 0 with a fresh KV cache.

    reference: an HF checkpoint folder, a .gguf file or a PreTrainedModel, run in transformers on the
    same windows (the file's token ids) to add its perplexity, the ratio, KL(ref || file) mean and
    p99, top-1 agreement and the largest absolute logit error.

    threads: kernel threads (None: one per physical core); mmap: map the file instead of reading it.
    """
    corpus = text if isinstance(text, Corpus) else Corpus.from_file(BUNDLED_CORPUS if text is None else text)
    model = FileModel(file, threads=threads, mmap=mmap)
    window = model.check_window(window)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < window:
        raise EvalError(
            f"tokens ({tokens!r}) is smaller than one window ({window}); evaluate at least {window} tokens "
            "(--tokens) or pass a smaller window (--window)")
    windows = corpus_windows(corpus, model.tokenizer, window, tokens // window, model.bos_prefix)
    notes: list[str] = []
    if model.logits_mode is LogitsMode.LAST:
        notes.append(LAST_LOGITS_NOTE)
    if len(windows) < tokens // window:
        notes.append(f"the corpus holds only {len(windows)} window(s) of {window} tokens, fewer than asked")

    ref = None
    if reference is not None:
        from ember.evals.reference import ReferenceModel

        ref = ReferenceModel.load(reference)
        notes += ref.check_compatible(model.vocab_size, model.tokenizer, corpus.text[:2000])

    from tqdm.auto import tqdm

    tally = Tally()
    file_seconds = ref_seconds = 0.0
    with tqdm(total=len(windows) * window, unit="tok", desc="ember eval", disable=not progress,
              file=sys.stderr, leave=False) as bar:
        for ids in windows:
            model.reset()
            started = time.perf_counter()
            logits = model.logits(ids, progress=bar.update)  # [L, V]
            file_seconds += time.perf_counter() - started
            ref_logits = None
            if ref is not None:
                started = time.perf_counter()
                ref_logits = ref.logits(ids)[:-1]  # [L-1, V]
                ref_seconds += time.perf_counter() - started
            tally.add(logits[:-1], np.asarray(ids[1:]), ref_logits)
            bar.set_postfix_str(f"ppl {np.exp(np.concatenate(tally.nll).mean()):.3f}")

    s = tally.summary()
    return EvalResult(
        file=model.path,
        corpus=corpus.label,
        logits=model.logits_mode.value,
        window=window,
        windows=len(windows),
        tokens=len(windows) * window,
        predicted=tally.count,
        perplexity=s["perplexity"],
        nll=s["nll"],
        seconds=file_seconds,
        reference=ref.name if ref is not None else None,
        reference_perplexity=s.get("reference_perplexity"),
        ppl_ratio=s.get("ppl_ratio"),
        kl_mean=s.get("kl_mean"),
        kl_p99=s.get("kl_p99"),
        kl_max=s.get("kl_max"),
        top1=s.get("top1"),
        max_logit_error=s.get("max_logit_error"),
        reference_seconds=ref_seconds if ref is not None else None,
        notes=tuple(notes),
        window_nll=tuple(float(x.mean()) for x in tally.nll),
    )
