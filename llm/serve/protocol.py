"""OpenAI request bodies -> typed, validated requests (any mistake -> a 400 APIError naming the field).

Fields this server does not implement are refused when they would change the answer (n > 1,
tools, logprobs, echo, a non-text response_format) and ignored when they cannot (user, metadata).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ember.llm.serve.errors import APIError, bad_request

__all__ = ["Sampling", "ChatRequest", "CompletionRequest", "parse_chat", "parse_completion"]

_ROLES = ("system", "developer", "user", "assistant", "tool")
_MAX_STOP = 4
_MAX_SEED = 2**64


@dataclass(frozen=True)
class Sampling:
    """The generation settings a request asked for (None: the model file's default)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float | None = None
    presence_penalty: float | None = None


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[dict[str, str], ...]
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: str | tuple[int, ...]
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _wrong_type(name: str, value: Any, expected: str) -> APIError:
    return bad_request(f"'{name}' must be {expected}, got {_type_name(value)} {value!r:.60}", param=name,
                       code="invalid_type")


def _number(body: Mapping[str, Any], name: str, lo: float, hi: float, lo_open: bool = False) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _wrong_type(name, value, "a finite number")
    if value > hi or value < lo or (lo_open and value == lo):
        left = "(" if lo_open else "["
        raise bad_request(f"'{name}' must be in {left}{lo:g}, {hi:g}], got {value!r}", param=name,
                          code="invalid_value")
    return float(value)


def _int(body: Mapping[str, Any], name: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(name, value, "an integer")
    if value < lo or (hi is not None and value >= hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi})"
        raise bad_request(f"'{name}' must be {bound}, got {value!r}", param=name, code="invalid_value")
    return value


def _bool(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong_type(name, value, "a boolean")
    return value


def _common(body: Any, served_model: str) -> tuple[str, Sampling, bool, bool]:
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {_type_name(body)}", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str):
        raise _wrong_type("model", model, "a string (see GET /v1/models)")
    if model != served_model:
        raise bad_request(f"the model '{model}' does not exist here; this server serves '{served_model}'",
                          param="model", code="model_not_found")
    n = _int(body, "n", 1)
    if n is not None and n != 1:
        raise bad_request(f"'n' must be 1 (one choice per request), got {n}", param="n", code="invalid_value")
    max_tokens = _int(body, "max_tokens", 1)
    if "max_completion_tokens" in body and body["max_completion_tokens"] is not None:
        max_tokens = _int(body, "max_completion_tokens", 1)
    top_p = _number(body, "top_p", 0.0, 1.0)
    temperature = _number(body, "temperature", 0.0, 2.0)
    if top_p == 0.0:  # nucleus of no mass: the most likely token only
        top_p, temperature = None, 0.0
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        if len(stop) > _MAX_STOP:
            raise bad_request(f"'stop' takes at most {_MAX_STOP} strings, got {len(stop)}", param="stop",
                              code="invalid_value")
        stops = tuple(s for s in stop if s)
    else:
        raise _wrong_type("stop", stop, "a string or an array of strings")
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=_int(body, "seed", 0, _MAX_SEED),
        stop=stops,
        frequency_penalty=_number(body, "frequency_penalty", -2.0, 2.0),
        presence_penalty=_number(body, "presence_penalty", -2.0, 2.0),
    )
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise _wrong_type("stream_options", options, "an object")
        if not stream:
            raise bad_request("'stream_options' is only allowed with 'stream': true", param="stream_options",
                              code="invalid_value")
        include_usage = _bool(options, "include_usage")
    for name in ("tools", "functions", "logit_bias"):
        if body.get(name):
            raise bad_request(f"'{name}' is not supported by this server; leave it out", param=name,
                              code="unsupported_parameter")
    if body.get("logprobs") not in (None, False) or body.get("top_logprobs") is not None:
        raise bad_request("'logprobs' is not supported by this server; leave it out", param="logprobs",
                          code="unsupported_parameter")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad_request("only 'response_format': {'type': 'text'} is supported", param="response_format",
                          code="unsupported_parameter")
    return model, sampling, stream, include_usage


def _content(message: Mapping[str, Any], index: int) -> str:
    content = message.get("content")
    param = f"messages[{index}].content"
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text parts can be served by a text model
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request(f"{param}: only text parts ({{'type': 'text', 'text': ...}}) are supported",
                                  param=param, code="invalid_value")
            texts.append(part["text"])
        return "".join(texts)
    raise _wrong_type(param, content, "a string or an array of text parts")


def parse_chat(body: Any, served_model: str) -> ChatRequest:
    model, sampling, stream, include_usage = _common(body, served_model)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _wrong_type("messages", messages, "an array of messages")
    if not messages:
        raise bad_request("'messages' is empty; send at least one message", param="messages", code="invalid_value")
    parsed = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _wrong_type(f"messages[{i}]", message, "an object with 'role' and 'content'")
        role = message.get("role")
        if role not in _ROLES:
            raise bad_request(f"messages[{i}].role must be one of {list(_ROLES)}, got {role!r:.40}",
                              param=f"messages[{i}].role", code="invalid_value")
        parsed.append({"role": "system" if role == "developer" else role, "content": _content(message, i)})
    return ChatRequest(model, tuple(parsed), sampling, stream, include_usage)


def parse_completion(body: Any, served_model: str) -> CompletionRequest:
    model, sampling, stream, include_usage = _common(body, served_model)
    if sampling.max_tokens is None:  # OpenAI's default for /v1/completions
        sampling = Sampling(**{**sampling.__dict__, "max_tokens": 16})
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise bad_request("'prompt' is empty", param="prompt", code="invalid_value")
        value: str | tuple[int, ...] = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        value = tuple(prompt)
    else:
        raise _wrong_type("prompt", prompt, "a non-empty string (or an array of token ids); one prompt per request")
    if body.get("echo"):
        raise bad_request("'echo' is not supported by this server", param="echo", code="unsupported_parameter")
    if body.get("suffix"):
        raise bad_request("'suffix' is not supported by this server", param="suffix", code="unsupported_parameter")
    return CompletionRequest(model, value, sampling, stream, include_usage)
