"""Tokenizer from metadata + incremental detokenizer (UTF-8 safety, sentencepiece spaces)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ember.llm.tokenizer import IncrementalDetokenizer, Tokenizer, TokenizerKind

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [
    "Hello world, how are you?",
    "Emoji: 👋🏽 family 👨‍👩‍👧‍👦 and flags 🇫🇷 done",
    "中文测试：你好，世界！日本語のテキストも。한국어",
    "  leading and  double  spaces\nnew line\ttab",
    "mixed ünïcödé — dash … ellipsis 😀😀😀",
]


@pytest.fixture(scope="module")
def smollm2_tokenizer(tmp_path_factory) -> Tokenizer:
    from .gguf_fixture import smollm2_hf_tokenizer

    hf = smollm2_hf_tokenizer()
    folder = tmp_path_factory.mktemp("smol_tok")
    hf.save_pretrained(folder)
    config = {"bos_id": hf.bos_token_id, "eos_ids": [hf.eos_token_id], "pad_id": hf.pad_token_id}
    return Tokenizer.from_metadata("hf_json", (folder / "tokenizer.json").read_bytes(), json.dumps(config))


@pytest.fixture(scope="module")
def sp_tokenizer() -> Tokenizer:
    import sentencepiece as spm

    text = ROOT / "evals" / "data" / "pride_and_prejudice.txt"  # bundled in the repo
    lines = text.read_text(encoding="utf-8").splitlines()[:3000]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([line for line in lines if line.strip()]),
        model_writer=model,
        vocab_size=400,
        byte_fallback=True,
        character_coverage=1.0,
        model_type="bpe",
        minloglevel=2,
    )
    config = {"bos_id": 1, "eos_ids": [2], "add_bos_token": True}
    return Tokenizer.from_metadata("sentencepiece", model.getvalue(), json.dumps(config))


def _stream(tok: Tokenizer, ids: list[int], prompt_ids=()) -> list[str]:
    detok = IncrementalDetokenizer(tok, prompt_ids=prompt_ids)
    pieces = [detok.push(i) for i in ids]
    pieces.append(detok.flush())
    return pieces


@pytest.mark.parametrize("text", TEXTS)
def test_byte_level_stream_equals_full_decode(smollm2_tokenizer: Tokenizer, text: str) -> None:
    ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
    pieces = _stream(smollm2_tokenizer, ids)
    assert "".join(pieces) == smollm2_tokenizer.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces), pieces


def test_byte_level_emoji_is_split_across_tokens(smollm2_tokenizer: Tokenizer) -> None:
    # The point of the detokenizer: some tokens alone are not valid UTF-8.
    ids = smollm2_tokenizer.encode("👨‍👩‍👧‍👦", add_special_tokens=False)
    assert any("\ufffd" in smollm2_tokenizer.decode([i]) for i in ids)
    pieces = _stream(smollm2_tokenizer, ids)
    assert "".join(pieces) == "👨‍👩‍👧‍👦"
    assert "" in pieces  # it held back at least once


@pytest.mark.parametrize("text", TEXTS)
def test_sentencepiece_stream_equals_full_decode(sp_tokenizer: Tokenizer, text: str) -> None:
    ids = sp_tokenizer.encode(text, add_special_tokens=False)
    pieces = _stream(sp_tokenizer, ids)
    assert "".join(pieces) == sp_tokenizer.decode(ids)
    assert not any("\ufffd" in p for p in pieces), pieces


def test_sentencepiece_cjk_uses_byte_fallback(sp_tokenizer: Tokenizer) -> None:
    ids = sp_tokenizer.encode("你好", add_special_tokens=False)
    assert any(sp_tokenizer.id_to_token(i).startswith("<0x") for i in ids)
    assert "".join(_stream(sp_tokenizer, ids)) == "你好"


def test_sentencepiece_leading_space_after_prompt(sp_tokenizer: Tokenizer) -> None:
    prompt = sp_tokenizer.encode("It is a truth", add_special_tokens=True)
    full = sp_tokenizer.encode("It is a truth universally acknowledged", add_special_tokens=True)
    assert full[: len(prompt)] == prompt
    generated = full[len(prompt) :]
    text = "".join(_stream(sp_tokenizer, generated, prompt_ids=prompt))
    assert text == " universally acknowledged"


def test_sentencepiece_special_tokens(sp_tokenizer: Tokenizer) -> None:
    ids = sp_tokenizer.encode("hello", add_special_tokens=True)
    assert ids[0] == sp_tokenizer.bos_id == 1
    assert sp_tokenizer.eos_ids == [2]
    assert sp_tokenizer.decode(ids, skip_special_tokens=True) == "hello"
    assert sp_tokenizer.vocab_size == 400


def test_hf_json_matches_transformers(smollm2_tokenizer: Tokenizer) -> None:
    from .gguf_fixture import smollm2_hf_tokenizer

    hf = smollm2_hf_tokenizer()
    for text in TEXTS:
        assert smollm2_tokenizer.encode(text) == hf(text)["input_ids"]
        assert smollm2_tokenizer.encode(text, add_special_tokens=False) == hf(text, add_special_tokens=False)["input_ids"]
    assert smollm2_tokenizer.token_to_id("<|im_end|>") == hf.convert_tokens_to_ids("<|im_end|>")
    assert smollm2_tokenizer.vocab_size == len(hf)
    assert smollm2_tokenizer.eos_ids == [hf.eos_token_id]


def test_bad_kind_and_empty_data() -> None:
    with pytest.raises(ValueError, match="'tiktoken'.*hf_json"):
        Tokenizer.from_metadata("tiktoken", b"x", "{}")
    with pytest.raises(ValueError, match="empty"):
        Tokenizer.from_metadata(TokenizerKind.HF_JSON, b"", "{}")


def test_tokenizer_and_chat_modules_import_without_torch() -> None:
    code = (
        "import sys, importlib.util, types\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'): raise ImportError('torch is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import ember.llm, ember.llm.tokenizer, ember.llm.chat_template, ember.llm.config, ember.llm.adapters\n"
        "ember.llm.adapters.supported_model_types()\n"
        "assert 'torch' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
