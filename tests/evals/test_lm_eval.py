"""The lm-eval adapter (model "ember"): log-likelihoods and greedy generations equal transformers' on a
tiny model, and lm-eval runs the local tiny tasks through it (API and the documented command)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402

from ember.evals.lm_eval_adapter import EmberLM  # noqa: E402

from .conftest import CONTEXT, REPO, TASKS  # noqa: E402

PAIRS = [
    ("Question: What is the capital of France?\nAnswer:", " Paris"),
    ("Question: What is the capital of France?\nAnswer:", " London is the capital"),
    ("It is a truth universally acknowledged, that a single man", " in possession of a good fortune"),
    ("", "My dear Mr. Bennet"),  # empty context: conditioned on BOS
]


def _requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


@torch.no_grad()
def _hf_logprob(model, ctx: list[int], cont: list[int]) -> tuple[float, bool]:
    ids = torch.tensor([ctx + cont])
    logprobs = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)[len(ctx) - 1:-1]  # [len(cont), V]
    target = torch.tensor(cont)
    return float(logprobs[torch.arange(len(cont)), target].sum()), bool((logprobs.argmax(-1) == target).all())


@pytest.mark.parametrize("mode", ["all", "last"])
def test_loglikelihood_matches_transformers(tiny, mode: str) -> None:
    lm = EmberLM(path=str(getattr(tiny, mode)))
    got = lm.loglikelihood(_requests("loglikelihood", PAIRS), disable_tqdm=True)
    tok = tiny.tokenizer
    for (ctx, cont), (logprob, greedy) in zip(PAIRS, got):
        if ctx:
            whole, ctx_ids = tok(ctx + cont).input_ids, tok(ctx).input_ids
            ctx_ids, cont_ids = whole[:len(ctx_ids)], whole[len(ctx_ids):]
        else:
            ctx_ids, cont_ids = [tok.bos_token_id], tok(cont, add_special_tokens=False).input_ids
        want, want_greedy = _hf_logprob(tiny.model, ctx_ids, cont_ids)
        assert logprob == pytest.approx(want, rel=1e-4, abs=1e-4), (ctx, cont)
        assert greedy == want_greedy


def test_loglikelihood_rolling_covers_long_text(tiny) -> None:
    text = (REPO / "evals" / "data" / "pride_and_prejudice.txt").read_text(encoding="utf-8")[1000:1600]
    lm = EmberLM(path=str(tiny.all))
    (got,) = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", [(text,)]), disable_tqdm=True)
    tokens = tiny.tokenizer(text, add_special_tokens=False).input_ids
    assert len(tokens) > 2 * CONTEXT  # several windows
    windows = map(make_disjoint_window, get_rolling_token_windows(tokens, tiny.tokenizer.bos_token_id, CONTEXT, 1))
    want = sum(_hf_logprob(tiny.model, list(ctx), list(pred))[0] for ctx, pred in windows)
    assert got == pytest.approx(want, rel=1e-5)


def test_generate_until_is_greedy_and_stops(tiny) -> None:
    from ..llm.tiny_models import reference_greedy

    lm = EmberLM(path=str(tiny.last), threads=1)
    prompts = ["Question: Who wrote Pride and Prejudice?\nAnswer:", "Mr. Darcy said"]
    got = lm.generate_until(_requests("generate_until", [(p, {"until": ["zzz"], "max_gen_toks": 6}) for p in prompts]),
                            disable_tqdm=True)
    for prompt, text in zip(prompts, got):
        trace = reference_greedy(tiny.model, tiny.tokenizer(prompt).input_ids, 6)
        assert text == tiny.tokenizer.decode(trace.tokens, skip_special_tokens=True)
    # a stop string cuts the text before it
    full = got[0]
    assert len(full) >= 4
    stop = full[len(full) // 2:][:2]
    (cut,) = lm.generate_until(_requests("generate_until", [(prompts[0], {"until": [stop], "max_gen_toks": 6})]),
                               disable_tqdm=True)
    assert cut == full[:full.index(stop)]


def test_bad_model_args_are_clear(tiny) -> None:
    from ember.evals import EvalError

    with pytest.raises(EvalError, match="path=FILE"):
        EmberLM()
    with pytest.raises(EvalError, match=r"unknown model_args for ember: \['temperature'\]"):
        EmberLM(path=str(tiny.all), temperature=1)
    with pytest.raises(EvalError, match=r"max_length must be in \[2, 64\]"):
        EmberLM(path=str(tiny.all), max_length=100)


def test_simple_evaluate_runs_the_tiny_tasks(tiny, monkeypatch) -> None:
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(REPO)  # the task YAMLs name their data files relative to the repository root
    results = lm_eval.simple_evaluate(
        model="ember", model_args=f"path={tiny.all}", tasks=["ember_tiny"],
        task_manager=TaskManager(include_path=str(TASKS)), verbosity="WARNING")
    r = results["results"]
    assert set(r) >= {"ember_tiny_mc", "ember_tiny_gen", "ember_tiny_ppl"}
    assert 0.0 <= r["ember_tiny_mc"]["acc,none"] <= 1.0
    assert 0.0 <= r["ember_tiny_gen"]["exact_match,none"] <= 1.0
    assert r["ember_tiny_ppl"]["word_perplexity,none"] > 1.0
    assert results["n-samples"]["ember_tiny_mc"]["effective"] == 20


def test_the_documented_command(tiny, tmp_path) -> None:
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    proc = subprocess.run(
        [sys.executable, "-m", "ember.evals.lm_eval_main", "--model", "ember", "--model_args", f"path={tiny.last}",
         "--tasks", "ember_tiny_mc", "--include_path", "tests/evals/data", "--limit", "4"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ember_tiny_mc" in proc.stdout and "acc" in proc.stdout
