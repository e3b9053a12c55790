"""ember.evals.

Quality of an exported .ember file: perplexity over fixed windows of a text and, against the
transformers reference, KL divergence, top-1 agreement and logit error (`ember eval`); the results
can be recorded in the file's eval.* metadata. An lm-eval adapter lives in
`ember.evals.lm_eval_adapter` (model name "ember"; `python -m ember.evals.lm_eval_main ...`).

    from ember.evals import evaluate, record
    result = evaluate("smol.ember", "corpus.txt", reference="SmolLM2.gguf", tokens=4096)
    print(result.table()); record("smol.ember", result)

Importing this package imports neither torch nor the runtime; the reference loads torch lazily.
"""

from __future__ import annotations

from ember._lazy import lazy_attributes

__all__ = ["Corpus", "EvalError", "EvalResult", "FileModel", "evaluate", "record"]

_LAZY = {
    "Corpus": "ember.evals.corpus",
    "EvalError": "ember.evals.errors",
    "EvalResult": "ember.evals.result",
    "FileModel": "ember.evals.file_model",
    "evaluate": "ember.evals.perplexity",
    "record": "ember.evals.recording",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
