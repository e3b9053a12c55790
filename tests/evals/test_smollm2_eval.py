"""The packaged SmolLM2-135M-Instruct GGUF: an fp32 export with logits="all" against the GGUF in
transformers (the reference) over 1024 tokens of the bundled corpus, and lm-eval's tiny tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.evals import evaluate

from tests.llm.gguf_fixture import GGUF_NAME, smollm2_gguf_path

from .conftest import CORPUS, REPO, TASKS


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(smollm2_fp32_all) -> tuple[Path, Path]:
    return smollm2_fp32_all, smollm2_gguf_path()


def test_fp32_export_matches_the_gguf_reference(smollm2) -> None:
    path, gguf = smollm2
    result = evaluate(path, CORPUS, reference=gguf, tokens=1024, progress=False)
    print("\n" + result.table())
    assert (result.window, result.windows, result.tokens) == (512, 2, 1024)
    assert result.reference == GGUF_NAME
    assert abs(result.ppl_ratio - 1.0) <= 1e-3
    assert result.top1 >= 0.99
    assert result.kl_mean < 1e-3
    assert 3.0 < result.perplexity < 60.0  # real English for a real model


def test_lm_eval_tiny_tasks_on_smollm2(smollm2, monkeypatch) -> None:
    lm_eval = pytest.importorskip("lm_eval")
    import ember.evals.lm_eval_adapter  # noqa: F401  (registers "ember")
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(REPO)
    results = lm_eval.simple_evaluate(model="ember", model_args=f"path={smollm2[0]}", tasks=["ember_tiny_mc"],
                                      task_manager=TaskManager(include_path=str(TASKS)), verbosity="WARNING")
    acc = results["results"]["ember_tiny_mc"]["acc,none"]
    print(f"\nSmolLM2 ember_tiny_mc acc = {acc:.2f}")
    assert acc >= 0.45  # 20 easy questions, 4 choices: chance is 0.25 (measured: 0.60)
