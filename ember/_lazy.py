"""Lazy package attributes (PEP 562): each public name is imported from its module on first access,
so importing a package never imports torch or the runtime it does not need yet."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def lazy_attributes(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``table`` maps a name to the module defining it."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    return __getattr__
