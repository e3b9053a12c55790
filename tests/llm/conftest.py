"""Make ``ember.llm`` importable from the source tree when the package is not installed."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
try:
    import ember.llm  # noqa: F401
except ImportError:
    if "ember" not in sys.modules:
        package = types.ModuleType("ember")
        package.__path__ = [str(_ROOT / "ember")]
        sys.modules["ember"] = package
    spec = importlib.util.spec_from_file_location(
        "ember.llm", _ROOT / "llm" / "__init__.py", submodule_search_locations=[str(_ROOT / "llm")]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["ember.llm"] = module
    spec.loader.exec_module(module)
    sys.modules["ember"].llm = module
