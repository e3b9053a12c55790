"""gguf_parse_once: transformers' config and weight loads share one GGUF parse, and the same weights."""

from __future__ import annotations

import gguf
import torch
from gguf import GGMLQuantizationType as QT
from transformers import AutoConfig

from ember.llm.gguf_parse_once import gguf_parse_once
from tests.quant.gguf_models import load_gguf_model, uniform_types, write_tiny_gguf


def test_one_parse_same_weights_and_gguf_restored(tmp_path, monkeypatch):
    path = write_tiny_gguf("llama", tmp_path / "tiny.gguf", uniform_types(QT.Q8_0))
    expected = load_gguf_model(path).state_dict()

    parses = []
    original = gguf.GGUFReader

    class CountingReader(original):
        def __init__(self, *args, **kwargs):
            parses.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    name_map = gguf.get_tensor_name_map
    with gguf_parse_once() as readers:
        AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
        got = load_gguf_model(path).state_dict()
    assert len(parses) == 1, parses
    assert list(readers) == [str(path.resolve())] and isinstance(readers[str(path.resolve())], original)
    assert gguf.GGUFReader is CountingReader and gguf.get_tensor_name_map is name_map  # restored
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), name

    AutoConfig.from_pretrained(path.parent, gguf_file=path.name)  # outside the context: parses again
    assert len(parses) == 2
