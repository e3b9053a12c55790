"""ember.load / LLM.generate / LLM.chat on a tiny exported Llama with a byte-level tokenizer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ember
from ember.llm.api import _StopMatcher
from ember.llm.generation import GenerationConfig
from ember.runtime.errors import EmberIOError, InvalidArgumentError

from tests.runners.tiny_llm import MAX_CONTEXT_LEN, tiny_llm_path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "It is a truth universally acknowledged"
SAMPLED = dict(temperature=1.0, seed=3, max_new_tokens=40)


@pytest.fixture(scope="module")
def path():
    return tiny_llm_path()


@pytest.fixture
def llm(path):
    return ember.load(path, threads=1)


def test_generate_text_is_the_decoded_tokens(llm) -> None:
    ids = llm.generate_ids(PROMPT, **SAMPLED)
    text = llm.generate(PROMPT, **SAMPLED)
    assert text == llm.tokenizer.decode(ids, skip_special_tokens=True)
    assert llm.stats.generated_tokens == 40 and llm.stats.stop_reason == "max_tokens"


def test_mapped_and_copied_loads_generate_the_same(path) -> None:
    copied, mapped = ember.load(path, threads=1), ember.load(path, threads=1, mmap=True)
    assert copied.generate_ids(PROMPT, **SAMPLED) == mapped.generate_ids(PROMPT, **SAMPLED)


def test_stream_pieces_join_to_the_full_text(llm) -> None:
    full = llm.generate(PROMPT, **SAMPLED)
    pieces = list(llm.generate(PROMPT, stream=True, **SAMPLED))
    assert "".join(pieces) == full and len(pieces) > 1
    # Byte-level tokens split multi-byte characters; every piece is still valid text.
    assert all(p.encode("utf-8").decode("utf-8") == p for p in pieces)


def test_stop_strings_cut_exactly(llm) -> None:
    full = llm.generate(PROMPT, **SAMPLED)
    stop = full[10:13]
    cut = full.find(stop)
    text = llm.generate(PROMPT, stop=[stop, "\x00never"], **SAMPLED)
    assert text == full[:cut]
    assert llm.stats.stop_reason == "stop_string" and llm.stats.generated_tokens < 40
    assert "".join(llm.generate(PROMPT, stop=stop, stream=True, **SAMPLED)) == full[:cut]


def test_stop_matcher_holds_back_partial_matches() -> None:
    m = _StopMatcher(["STOP"])
    assert m.feed("abc ST") == "abc "     # "ST" may start STOP: held back
    assert m.feed("x") == "STx"            # it did not
    assert m.feed("..S") == ".."
    assert m.feed("TOP tail") == "" and m.hit


def test_seeds_reproduce_and_greedy_is_default(llm) -> None:
    assert llm.generate(PROMPT, **SAMPLED) == llm.generate(PROMPT, **SAMPLED)
    assert llm.generate(PROMPT, **{**SAMPLED, "seed": 4}) != llm.generate(PROMPT, **SAMPLED)
    assert llm.generation_config.greedy
    assert llm.generate(PROMPT, max_new_tokens=8) == llm.generate(PROMPT, max_new_tokens=8, seed=99)


def test_chat_reuses_the_cache_across_turns(llm, path) -> None:
    messages = [{"role": "user", "content": "Hello there"}]
    first = llm.chat(messages, max_new_tokens=6)
    messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "And then?"}]
    second = llm.chat(messages, max_new_tokens=6)
    stats = llm.stats
    assert stats.reused_tokens > 10 and stats.prefill_tokens < stats.prompt_tokens
    fresh = ember.load(path, threads=1).chat(messages, max_new_tokens=6)
    assert second == fresh
    llm.reset()
    assert llm.cached_tokens == []


def test_chat_renders_the_files_template(llm) -> None:
    llm.chat([{"role": "user", "content": "Hi"}], max_new_tokens=2)
    rendered = llm.tokenizer.decode(llm.cached_tokens[: llm.stats.prompt_tokens])
    assert rendered.startswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_stream_is_superseded_by_a_new_call(llm) -> None:
    stream = llm.generate(PROMPT, stream=True, **SAMPLED)
    next(stream)
    llm.generate(PROMPT, max_new_tokens=2)
    with pytest.raises(RuntimeError, match="superseded"):
        list(stream)


@pytest.mark.parametrize(
    "prompt, match",
    [("", "empty"), ([], "no token ids"), ([1, 9999], "9999 is outside the vocabulary"),
     ([1] * (MAX_CONTEXT_LEN + 1), "context holds"), ("word " * 200, "context holds")],
)
def test_bad_prompts(llm, prompt, match) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        llm.generate(prompt, max_new_tokens=2)


def test_bad_settings_name_the_value(llm) -> None:
    with pytest.raises(ValueError, match=r"temperature must be >= 0.*-0.5"):
        llm.generate(PROMPT, temperature=-0.5)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\].*1.5"):
        llm.generate(PROMPT, top_p=1.5)
    with pytest.raises(TypeError, match="bogus"):
        llm.generate(PROMPT, bogus=1)
    with pytest.raises(InvalidArgumentError, match="threads"):
        ember.load(llm.path, threads=0)


def test_missing_and_non_llm_files(tmp_path) -> None:
    with pytest.raises(EmberIOError, match="no such file"):
        ember.load(tmp_path / "missing.ember")
    torch = pytest.importorskip("torch")
    from ember.export import lower
    from tests.helpers import export

    class Plain(torch.nn.Module):
        def forward(self, x):
            return x * 2

    plain = tmp_path / "plain.ember"
    lower(export(Plain(), (torch.zeros(3),))).save(str(plain))
    with pytest.raises(InvalidArgumentError, match="not an LLM program"):
        ember.load(plain)


def test_generation_config_validation_and_metadata_defaults() -> None:
    for bad in [dict(max_new_tokens=0), dict(max_new_tokens=True), dict(temperature=float("nan")),
                dict(top_k=-1), dict(top_k=1.5), dict(top_p=0), dict(min_p=1.0), dict(repetition_penalty=0),
                dict(penalty_window=-1), dict(seed=-1), dict(seed=2**64), dict(stop=[""])]:
        with pytest.raises(ValueError, match=next(iter(bad))):
            GenerationConfig(**bad)
    assert GenerationConfig(stop="x").stop == ("x",)
    cfg = GenerationConfig.from_metadata({"generation.temperature": 0.6, "generation.top_p": 0.9}, seed=1)
    assert (cfg.temperature, cfg.top_p, cfg.seed) == (0.6, 0.9, 1)
    assert GenerationConfig.from_metadata({}) == GenerationConfig()


def test_generate_path_imports_without_torch(path) -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'): raise ImportError('torch is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import ember\n"
        f"llm = ember.load({str(path)!r}, threads=1)\n"
        "print(repr(llm.generate('Hello', max_new_tokens=4)))\n"
        "print(llm.chat([{'role': 'user', 'content': 'Hi'}], max_new_tokens=3, stream=False) is not None)\n"
        "assert 'torch' not in sys.modules\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported (~16 MiB of resident memory)'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT))
    assert result.returncode == 0, result.stderr


def test_bench_cli_imports_neither_torch_nor_numpy(path) -> None:
    """`ember bench` runs with both blocked: its peak RSS bound (file + KV cache + 60 MiB) has no
    room for numpy's ~16 MiB, and the CLI registers every subcommand (inspect, eval) in the process."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'numpy'): raise ImportError(name + ' is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from ember.cli import main\n"
        f"sys.exit(main(['bench', {str(path)!r}, '--prompt-len', '8', '--gen-len', '4', '--repeats', '1', "
        "'--threads', '1']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT))
    assert result.returncode == 0, result.stderr
    assert "tg4" in result.stdout, result.stdout
