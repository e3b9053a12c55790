"""HF chat templates rendered in a sandboxed Jinja environment (no torch, no transformers).

Mirrors transformers' ``apply_chat_template`` conventions: ``messages``, ``tools``,
``documents``, ``add_generation_prompt``, the tokenizer's special tokens
(``bos_token``, ``eos_token``, ...) as variables, ``raise_exception``, ``strftime_now``,
a non-HTML-escaping ``tojson``, ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``
and the ``{% generation %}`` block (rendered as its body).

A template comes from a file, so it is untrusted code: besides Jinja's sandbox (no attribute
access to internals, ``range`` capped at 100,000), rendering runs under a ``RenderBudget``:
a deadline checked on every line the template (or a Jinja helper it calls) executes, and a cap
on the output and on any string or list it builds (``*``, ``+``, ``%``, string methods, filters,
``namespace`` attributes). A template over budget raises ``ChatTemplateError``, never hangs.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplate", "ChatTemplateError", "RenderBudget", "render_chat_template"]


class ChatTemplateError(ValueError):
    """The chat template failed to render (its own ``raise_exception``, a Jinja error, or its budget)."""


@dataclass(frozen=True)
class RenderBudget:
    """Limits of one render: ``seconds`` of wall time and ``max_chars`` of output (also the
    largest string or list the template may build). Real chat templates render in milliseconds
    and produce about 4 characters per prompt token."""

    seconds: float = 5.0
    max_chars: int = 16 * 2**20

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) \
                or not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"RenderBudget.seconds must be a finite number > 0, got {self.seconds!r}")
        if isinstance(self.max_chars, bool) or not isinstance(self.max_chars, int) or self.max_chars < 1:
            raise ValueError(f"RenderBudget.max_chars must be an int >= 1, got {self.max_chars!r}")


class _OverBudget(Exception):
    """Raised inside a render that exceeded its RenderBudget (turned into ChatTemplateError)."""


_active = threading.local()  # .budget, .deadline of the render running on this thread


def _max_chars() -> int:
    budget = getattr(_active, "budget", None)
    return budget.max_chars if budget is not None else RenderBudget.max_chars


def _check_size(value: Any, what: str) -> Any:
    if isinstance(value, (str, list, tuple, dict)) and len(value) > _max_chars():
        raise _OverBudget(f"{what} built a value of {len(value):,} items, over the budget of {_max_chars():,}")
    return value


def _check_count(n: Any, what: str) -> None:
    if isinstance(n, int) and not isinstance(n, bool) and n > _max_chars():
        raise _OverBudget(f"{what} asked for {n:,} characters or items, over the budget of {_max_chars():,}")


_SIZED = (str, list, tuple)
_PERCENT_WIDTH = re.compile(r"%[-#0 +]*(\*|\d+)(\.(\*|\d+))?")
_FORMAT_WIDTH = re.compile(r"\{[^{}]*:[^{}]*?(\d{8,})")
_SIZING_STR_METHODS = {"ljust", "rjust", "center", "zfill", "expandtabs"}


def _binop(op: str, left: Any, right: Any) -> Any:
    """Checked arithmetic: no operator may build a value over the budget (or a huge power)."""
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, _SIZED) and isinstance(n, int):
                _check_count(len(seq) * n, f"'{type(seq).__name__} * {n}'")
    elif op == "+" and isinstance(left, _SIZED) and isinstance(right, _SIZED):
        _check_count(len(left) + len(right), "'+'")
    elif op == "**" and isinstance(left, (int, float)) and isinstance(right, (int, float)):
        if abs(right) > 4096 and abs(left) > 1:
            raise _OverBudget(f"'{left!r} ** {right!r}' is too large a power for a chat template")
    elif op == "%" and isinstance(left, str):
        for match in _PERCENT_WIDTH.finditer(left):
            widths = [g for g in (match.group(1), match.group(3)) if g]
            if "*" in widths or any(int(w) > _max_chars() for w in widths):
                raise _OverBudget(f"'%' format width {match.group(0)!r} is not allowed in a chat template")
    return _check_size(_BINOPS[op](left, right), f"'{op}'")


_BINOPS = {"+": operator.add, "*": operator.mul, "**": operator.pow, "%": operator.mod}


def _budgeted_filter(name: str, func: Any) -> Any:
    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for value in (*args[1:], *kwargs.values()):
            _check_count(value, f"the '{name}' filter")
        return _check_size(func(*args, **kwargs), f"the '{name}' filter")

    return checked


class _BudgetedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with size checks on operators, calls and filters."""

    intercepted_binops = frozenset(_BINOPS)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters = {name: _budgeted_filter(name, f) for name, f in self.filters.items()}

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        return _binop(operator, left, right)

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        spec = str(value.__self__)

        def checked(*args: Any, **kwargs: Any) -> str:
            width = _FORMAT_WIDTH.search(spec)
            if width and int(width.group(1)) > _max_chars():
                raise _OverBudget(f"format width {width.group(1)} in {spec[:40]!r} is over the budget of {_max_chars():,}")
            for arg in (*args, *kwargs.values()):
                _check_count(arg, f"str.{value.__name__}")
            return _check_size(wrapped(*args, **kwargs), f"str.{value.__name__}")

        return checked

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's signature)
        if isinstance(getattr(__obj, "__self__", None), str) and getattr(__obj, "__name__", "") in _SIZING_STR_METHODS:
            for value in (*args, *kwargs.values()):
                _check_count(value, f"str.{__obj.__name__}")
        return _check_size(super().call(__context, __obj, *args, **kwargs), "a call")


def _deadline_tracer(frame: Any, event: str, arg: Any) -> Any:
    """sys.settrace hook of a render: every call and every executed line checks the deadline,
    so a template loop (or a Jinja helper's loop) cannot run past it."""
    if getattr(_active, "budget", None) is None:
        return None  # the render ended (a generator frame being closed late)
    if time.monotonic() > _active.deadline:
        raise _OverBudget(f"rendering took longer than the budget of {_active.budget.seconds:g} s")
    return _deadline_tracer


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

    def __setitem__(self, name: str, value: Any) -> None:  # `{% set ns.x = ... %}` lands here
        _SafeNamespace._check(name)
        _check_size(value, f"namespace attribute {name!r}")
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set underscore attribute {name!r}")



@lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    env = _BudgetedSandbox(
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
    budget: RenderBudget = field(default_factory=RenderBudget)

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
        context = dict(
            messages=_plain(list(messages)),
            tools=_plain(tools),
            documents=_plain(documents),
            add_generation_prompt=add_generation_prompt,
            **_plain(variables),
        )
        template = _compile(self.source)
        pieces: list[str] = []
        size = 0
        previous_trace = sys.gettrace()
        _active.budget, _active.deadline = self.budget, time.monotonic() + self.budget.seconds
        sys.settrace(_deadline_tracer)
        stream = template.generate(**context)
        try:
            for piece in stream:
                size += len(piece)
                if size > self.budget.max_chars:
                    raise _OverBudget(f"the output passed the budget of {self.budget.max_chars:,} characters")
                pieces.append(piece)
        except _OverBudget as error:
            raise ChatTemplateError(
                f"chat template over its budget: {error}; the file's template is broken or hostile "
                "(RenderBudget raises the limits for a legitimate template)") from None
        except jinja2.exceptions.TemplateError as error:
            raise ChatTemplateError(f"chat template failed: {error}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError, RecursionError,
                MemoryError) as error:
            raise ChatTemplateError(f"chat template failed: {type(error).__name__}: {error}") from None
        finally:
            _active.budget = None
            stream.close()
            sys.settrace(previous_trace)
        return "".join(pieces)


def render_chat_template(
    source: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    special_tokens: Mapping[str, Any] | None = None,
    budget: RenderBudget | None = None,
    **extra: Any,
) -> str:
    return ChatTemplate(source, dict(special_tokens or {}), budget or RenderBudget()).render(
        messages, add_generation_prompt=add_generation_prompt, **extra
    )
