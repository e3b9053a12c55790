"""ember.llm: LLM export (torch, lazy) and the torch-free tokenizer / chat-template layer.

Importing this package never imports torch: ``export_llm`` and the other export-side
names are resolved on first access through ``__getattr__``.
"""

from __future__ import annotations

from ember._lazy import lazy_attributes

__all__ = [
    "export_llm",
    "ExportConfig",
    "ExportableLLM",
    "DType",
    "LogitsMode",
    "Tokenizer",
    "IncrementalDetokenizer",
    "render_chat_template",
    "ChatTemplate",
    "get_adapter",
    "supported_model_types",
]

# name -> submodule defining it; torch-dependent modules are only imported on access.
_LAZY = {
    "export_llm": "exporter",
    "ExportableLLM": "exportable",
    "ExportConfig": "config",
    "DType": "config",
    "LogitsMode": "config",
    "Tokenizer": "tokenizer",
    "IncrementalDetokenizer": "tokenizer",
    "render_chat_template": "chat_template",
    "ChatTemplate": "chat_template",
    "get_adapter": "adapters",
    "supported_model_types": "adapters",
}


__getattr__ = lazy_attributes(__name__, {name: f"{__name__}.{module}" for name, module in _LAZY.items()})


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
