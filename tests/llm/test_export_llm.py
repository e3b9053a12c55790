"""export_llm: config validation, sources, metadata contract, logits modes, the packaged GGUF."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import ember.runtime

from ember.llm.config import DType, ExportConfig, LogitsMode
from ember.llm.exporter import export_llm, export_program
from ember.llm.exportable import ExportableLLM
from ember.llm.source import SourceError

from .gguf_fixture import smollm2_gguf_path, smollm2_hf_tokenizer
from .tiny_models import clone_model, make_tiny_model

METADATA_TYPES = (int, float, bool, str, bytes)


def test_config_validation_names_the_bad_value() -> None:
    with pytest.raises(ValueError, match="dtype 'int3'.*float32"):
        ExportConfig(dtype="int3")
    with pytest.raises(ValueError, match="logits 'first'.*'last'"):
        ExportConfig(logits="first")
    with pytest.raises(ValueError, match=r"max_seq_len \(256\) must not exceed max_context_len \(128\)"):
        ExportConfig(max_context_len=128, max_seq_len=256)
    with pytest.raises(ValueError, match="max_context_len must be a positive int, got 0"):
        ExportConfig(max_context_len=0)
    config = ExportConfig(dtype="bfloat16", logits="all")
    assert config.dtype is DType.BFLOAT16 and config.logits is LogitsMode.ALL


def test_all_logits_match_hf() -> None:
    model, config = make_tiny_model("gemma2")
    wrapper = ExportableLLM(clone_model(model), ExportConfig(max_context_len=64, max_seq_len=16, logits="all"))
    ids = torch.randint(3, config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(input_ids=ids).logits  # [1, 20, V]
        first = wrapper(ids[:, :16], torch.tensor([0]))
        second = wrapper(ids[:, 16:], torch.tensor([16]))
    assert first.shape == (1, 16, config.vocab_size)
    torch.testing.assert_close(torch.cat([first, second], dim=1), expected, rtol=1e-4, atol=1e-4)


@pytest.fixture
def tiny_folder(tmp_path):
    model, _ = make_tiny_model("llama")
    model.generation_config.temperature = 0.6
    model.generation_config.top_p = 0.9
    model.generation_config.do_sample = True
    model.save_pretrained(tmp_path)
    smollm2_hf_tokenizer().save_pretrained(tmp_path)
    return tmp_path


def test_folder_source_metadata(tiny_folder) -> None:
    exported, metadata, wrapper = export_program(tiny_folder, ExportConfig(max_context_len=64, max_seq_len=8), progress=False)
    assert metadata["llm.family"] == "llama"
    assert metadata["llm.max_context_len"] == 64 and metadata["llm.max_seq_len"] == 8
    assert metadata["llm.vocab_size"] == 384
    assert metadata["tokenizer.kind"] == "hf_json"
    assert metadata["tokenizer.data"] == (tiny_folder / "tokenizer.json").read_bytes()
    assert "<|im_start|>" in metadata["chat.template"]
    assert metadata["generation.temperature"] == pytest.approx(0.6)
    assert metadata["generation.top_p"] == pytest.approx(0.9)
    assert "generation.top_k" not in metadata  # not set by the checkpoint
    tok_config = json.loads(metadata["tokenizer.config"])
    assert tok_config["eos_ids"] == metadata["llm.eos_ids"] and metadata["llm.eos_ids"][0] == 2
    for key, value in metadata.items():
        ok = isinstance(value, METADATA_TYPES) or (isinstance(value, list) and all(type(v) is int for v in value))
        assert ok, f"{key}: {type(value).__name__}"
    sig = exported.graph_signature
    assert set(sig.buffers_to_mutate.values()) == {f"{kv}_cache_{i}" for kv in "kv" for i in range(2)}


def test_folder_without_tokenizer_is_a_clear_error(tmp_path) -> None:
    model, _ = make_tiny_model("llama")
    model.save_pretrained(tmp_path)
    with pytest.raises(SourceError, match="no tokenizer.json or tokenizer.model"):
        export_program(tmp_path, ExportConfig(max_context_len=64, max_seq_len=8), progress=False)


def test_missing_source_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        export_program(tmp_path / "nope", ExportConfig(), progress=False)


def test_export_llm_writes_a_self_contained_file(tmp_path) -> None:
    """export_llm lowers, saves, and the file carries the tokenizer, template and llm metadata."""
    import ember.runtime

    model, _ = make_tiny_model("qwen3")
    out = tmp_path / "tiny.ember"
    program = export_llm(model, out, max_context_len=32, max_seq_len=8, tokenizer=smollm2_hf_tokenizer(),
                         progress=False)
    assert out.exists() and program.methods == ["forward"]
    md = ember.runtime.load(out).metadata
    assert md["llm.family"] == "qwen3" and md["llm.logits"] == "last"
    assert md["llm.max_seq_len"] == 8 and md["llm.max_context_len"] == 32
    assert md["tokenizer.kind"] == "hf_json" and len(md["tokenizer.data"]) > 1000
    assert "im_start" in md["chat.template"]


def test_export_llm_unknown_backend_lists_available(tmp_path) -> None:
    model, _ = make_tiny_model("qwen3")
    with pytest.raises(ValueError, match="unknown backend 'npu'.*reference"):
        export_llm(model, tmp_path / "x.ember", max_context_len=32, max_seq_len=8, backend="npu",
                   tokenizer=smollm2_hf_tokenizer(), progress=False)


@pytest.mark.slow
def test_packaged_gguf_greedy_chat_matches_transformers() -> None:
    from transformers import AutoModelForCausalLM

    from .tiny_models import step_greedy

    path = smollm2_gguf_path()
    tok = smollm2_hf_tokenizer()
    exported, metadata, _ = export_program(path, ExportConfig(max_context_len=128, max_seq_len=32), progress=False)
    assert metadata["llm.family"] == "llama" and metadata["chat.template"] == tok.chat_template
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=False
    )
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    trace = step_greedy(exported.module(), ids, 12, 32)
    text = tok.decode(trace.tokens, skip_special_tokens=True)
    assert text.startswith("The capital of France is Paris."), text

    ref = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, attn_implementation="eager")
    with torch.no_grad():
        generated = ref.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids) :].tolist()
    n = min(len(generated), len(trace.tokens))
    assert trace.tokens[:n] == generated[:n]


def test_do_sample_is_always_recorded(tmp_path) -> None:
    """A checkpoint with a temperature but transformers' default do_sample=False decodes greedily in
    transformers; the file must say so (to_diff_dict alone drops do_sample=False)."""
    from ember.llm.generation import GenerationConfig

    model, _ = make_tiny_model("llama")
    model.generation_config.temperature = 0.6
    model.generation_config.do_sample = True  # transformers refuses to save the combination below
    model.save_pretrained(tmp_path)
    smollm2_hf_tokenizer().save_pretrained(tmp_path)
    gen_file = tmp_path / "generation_config.json"
    written = json.loads(gen_file.read_text())
    del written["do_sample"]  # as checkpoints in the wild have it: a temperature, do_sample left default
    gen_file.write_text(json.dumps(written))
    _, metadata, _ = export_program(tmp_path, ExportConfig(max_context_len=16, max_seq_len=4), progress=False)
    assert metadata["generation.do_sample"] is False
    assert GenerationConfig.from_metadata(metadata).greedy


def test_do_sample_true_is_recorded(tiny_folder) -> None:
    from ember.llm.generation import GenerationConfig

    _, metadata, _ = export_program(tiny_folder, ExportConfig(max_context_len=16, max_seq_len=4), progress=False)
    assert metadata["generation.do_sample"] is True
    assert GenerationConfig.from_metadata(metadata).temperature == pytest.approx(0.6)


def _ember_cli(*args: str, pre: str = "") -> subprocess.CompletedProcess:
    code = f"{pre}\nimport sys\nfrom ember.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)


_BLOCK_TORCH = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('torch', 'transformers', 'torchao'): raise ImportError(name + ' is blocked')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def test_export_checks_the_source_before_importing_torch(tmp_path) -> None:
    not_ember = tmp_path / "x.ember"
    not_ember.write_bytes(b"EMBR" + b"\0" * 60)
    empty = tmp_path / "empty"
    empty.mkdir()
    for source, message in ((tmp_path / "missing", "does not exist"), (not_ember, "is already an .ember program"),
                            (empty, "has no config.json")):
        r = _ember_cli("export", str(source), "-o", str(tmp_path / "out.ember"), pre=_BLOCK_TORCH)
        assert r.returncode == 1 and message in r.stderr and "blocked" not in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_export_cli_is_quiet_and_summarizes_the_cache(tiny_folder, tmp_path) -> None:
    out = tmp_path / "tiny.ember"
    r = _ember_cli("export", str(tiny_folder), "-o", str(out), "--max-context-len", "32", "--max-seq-len", "4")
    assert r.returncode == 0, r.stderr
    for noise in ("Failed to load", "_pytree", "Warning", "warn("):
        assert noise not in r.stderr and noise not in r.stdout, (noise, r.stderr[-2000:])
    state = [line for line in r.stdout.splitlines() if "state" in line]
    assert state == ["  state: 4 tensors (k_cache_0..1, v_cache_0..1), float32[1, 2, 32, 16] each, 16.0 KiB"], state
    metadata = ember.runtime.load(out).metadata
    assert 0 < metadata["export.lowering_seconds"] < metadata["export.total_seconds"]
    assert metadata["llm.n_params"] > 0 and metadata["llm.hidden_size"] == 64 and metadata["llm.rope_type"] == "default"
