"""ember: export Hugging Face LLMs to one .ember file and run them on a small C++ runtime.

    import ember
    ember.export_llm("./SmolLM2-135M-Instruct", "smol.ember")   # needs torch (pip install 'ember[export]')
    llm = ember.load("smol.ember")                              # no torch needed from here on
    print(llm.generate("Once upon a time", max_new_tokens=32))
"""

from __future__ import annotations

from ember._lazy import lazy_attributes

__version__ = "0.1.0"

__all__ = ["GenerationConfig", "__version__", "export_llm", "load"]

_LAZY = {
    "load": "ember.llm.api",
    "GenerationConfig": "ember.llm.generation",
    "export_llm": "ember.llm.exporter",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
