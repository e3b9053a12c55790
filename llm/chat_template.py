"""HF chat templates rendered in a sandboxed Jinja environment (no torch, no transformers).

Mirrors transformers' ``apply_chat_template`` conventions: ``messages``, ``tools``,
``documents``, ``add_generation_prompt``, the tokenizer's special tokens
(``bos_token``, ``eos_token``, ...) as variables, ``raise_exception``, ``strftime_now``,
a non-HTML-escaping ``tojson``, ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``
and the ``{% generation %}`` block (rendered as its body).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplate", "ChatTemplateError", "render_chat_template"]


class ChatTemplateError(ValueError):
    """The chat template failed to render (its own ``raise_exception`` or a Jinja error)."""


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes HTML characters, which chat templates must not do.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` marks assistant text for training masks; here it renders its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller) -> str:
        return caller()


class _SafeNamespace(jinja2.utils.Namespace):
    """``namespace(...)`` that refuses underscore names (no reach into CPython internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # same signature trick as jinja2's Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _SafeNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _SafeNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set underscore attribute {name!r}")


@lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _SafeNamespace
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise ChatTemplateError(f"chat template does not parse (line {error.lineno}): {error.message}") from None


def _plain(value: Any) -> Any:
    """Rebuild inputs out of plain JSON types so the sandbox sees no foreign objects."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return f"<{type(value).__name__}>"


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template plus the special-token variables it renders with (``bos_token``, ``eos_token``, ...)."""

    source: str
    special_tokens: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ChatTemplateError("the chat template is empty; pass the model's template string")
        _compile(self.source)  # fail early on syntax errors

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """Render ``messages`` ([{"role": ..., "content": ...}, ...]) to the prompt text."""
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping) or "role" not in message:
                raise ChatTemplateError(f"message {index} must be a dict with a 'role', got {message!r}")
        variables = {**dict(self.special_tokens), **extra}
        try:
            return _compile(self.source).render(
                messages=_plain(list(messages)),
                tools=_plain(tools),
                documents=_plain(documents),
                add_generation_prompt=add_generation_prompt,
                **_plain(variables),
            )
        except jinja2.exceptions.TemplateError as error:
            raise ChatTemplateError(f"chat template failed: {error}") from None


def render_chat_template(
    source: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    special_tokens: Mapping[str, Any] | None = None,
    **extra: Any,
) -> str:
    return ChatTemplate(source, dict(special_tokens or {})).render(
        messages, add_generation_prompt=add_generation_prompt, **extra
    )
