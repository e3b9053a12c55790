"""ember: export Hugging Face LLMs to one .ember file and run them on a small C++ runtime.

    import ember
    ember.export_llm("./SmolLM2-135M-Instruct", "smol.ember")   # needs torch (pip install 'ember[export]')
    llm = ember.load("smol.ember")                              # no torch needed from here on
    print(llm.generate("Once upon a time", max_new_tokens=32))
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["GenerationConfig", "__version__", "export_llm", "load"]

_LAZY = {
    "load": "ember.llm.api",
    "GenerationConfig": "ember.llm.generation",
    "export_llm": "ember.llm.exporter",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ember' has no attribute '{name}'")
