"""The generate / chat API over the C++ text runner (numpy only: no torch needed).

    llm = ember.load("smol.ember", threads=2)
    llm.generate("Once upon a time", max_new_tokens=32)                  # -> str
    for piece in llm.generate("Hi", stream=True): print(piece, end="")    # UTF-8-safe pieces
    llm.chat([{"role": "user", "content": "What is the capital of France?"}])
    llm.stats                                                             # last call's timings

The runner keeps the token ids whose K/V are in the cache; every call reuses the longest common
prefix with them and prefills only the rest, so a multi-turn chat recomputes only the new turn.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ember.llm.generation import GenerationConfig
from ember.runtime.errors import InvalidArgumentError, InvalidProgramError
from ember.runtime.file_check import check_program_path

__all__ = ["LLM", "GenerationStats", "forward_batch", "load"]

Message = Mapping[str, Any]

MAX_THREADS_ARGUMENT = 2**31 - 1  # the C++ runner takes an int; the runtime caps the pool itself


@dataclass(frozen=True)
class GenerationStats:
    """Timings of the last generate/chat call (times in milliseconds)."""

    load_ms: float = 0.0
    prompt_tokens: int = 0
    reused_tokens: int = 0          # prompt prefix found in the cache, not recomputed
    prefill_tokens: int = 0
    prefill_ms: float = 0.0
    prefill_tokens_per_s: float = 0.0
    time_to_first_token_ms: float = 0.0
    generated_tokens: int = 0
    decode_steps: int = 0
    decode_ms: float = 0.0
    decode_tokens_per_s: float = 0.0
    decode_batch_mean: float = 0.0  # sessions sharing each decode step on average (1.0: it ran alone)
    sampling_ms: float = 0.0
    peak_rss_bytes: int = 0
    stop_reason: str = "none"       # eos | stop_token | stop_string | max_tokens | context_full | stopped

    @classmethod
    def from_native(cls, raw: Mapping[str, Any], **overrides: Any) -> "GenerationStats":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in {**raw, **overrides}.items() if k in names})

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def summary(self) -> str:
        return (
            f"prompt {self.prompt_tokens} tok ({self.reused_tokens} reused), "
            f"prefill {self.prefill_tokens_per_s:.1f} tok/s, first token {self.time_to_first_token_ms:.1f} ms, "
            f"decode {self.generated_tokens} tok at {self.decode_tokens_per_s:.1f} tok/s, "
            f"sampling {self.sampling_ms:.1f} ms, load {self.load_ms:.0f} ms, "
            f"peak RSS {self.peak_rss_bytes / 2**20:.0f} MiB, stop: {self.stop_reason}"
        )


class _StopMatcher:
    """Cuts streamed text exactly before the first stop string, holding back any tail that
    could still become one, so no emitted piece ever contains part of a stop string."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._held = ""
        self.hit = False

    def feed(self, piece: str) -> str:
        if not self._stops:
            return piece
        text = self._held + piece
        cut = min((i for i in (text.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.hit = True
            self._held = ""
            return text[:cut]
        keep = 0  # longest suffix of text that is a proper prefix of some stop string
        for s in self._stops:
            for n in range(min(len(s) - 1, len(text)), keep, -1):
                if text.endswith(s[:n]):
                    keep = n
                    break
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


class LLM:
    """A loaded LLM program: tokenizer, chat template and the C++ text runner."""

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None, mmap: bool = False) -> None:
        from ember.runners import _runner

        path = check_program_path(path)  # a folder, a .gguf, ...: says what to run instead
        _check_threads(threads, "None (one per physical core)")
        self._setup(path, _runner, _runner.Runner(path, threads or 0, bool(mmap)), None)

    def _setup(self, path: str, native: Any, runner: Any, parent: "LLM | None") -> None:
        self.path = path
        self._native = native
        self._runner = runner
        self.metadata: dict[str, Any] = parent.metadata if parent is not None else dict(runner.metadata)
        self.vocab_size: int = int(self._runner.vocab_size)
        self.max_context_len: int = int(self._runner.max_context_len)
        self.max_seq_len: int = int(self._runner.max_seq_len)
        self.eos_ids: list[int] = list(self._runner.eos_ids)
        self.generation_config = GenerationConfig.from_metadata(self.metadata)
        # Immutable once built: sessions share their parent's (built ones; else they build their own).
        self._tokenizer: Any = parent._tokenizer if parent is not None else None
        self._chat_template: Any = parent._chat_template if parent is not None else None
        self._generation = 0  # bumps on every start: a stale stream refuses to continue
        self._stats = GenerationStats.from_native(self._runner.stats)

    def session(self, threads: int | None = None) -> "LLM":
        """Another, independent conversation over the same loaded weights (never loaded again).

        The session has its own KV cache, activation arena, cached prompt and stats, and the
        same generate/chat API. Sessions may generate at the same time from different threads
        (one thread per session at a time), with the same results as one after another; each
        costs its KV cache (`state_bytes`) plus its arena (`arena_bytes`), not the weights.
        Their steps share one process-wide kernel thread pool (sized by `ember.load(threads=)`);
        `threads` caps how many of its threads this session's steps use (None: all; 1: the
        session's own thread only). A step batched with other sessions' runs on the largest
        count among them."""
        _check_threads(threads, "None (the whole pool)")
        if self._tokenizer is None and self.metadata.get("tokenizer.data") is not None:
            _ = self.tokenizer  # build once here, so sessions share it (tokenizers are thread-safe)
        if self._chat_template is None and self.metadata.get("chat.template"):
            _ = self.chat_template
        other = LLM.__new__(LLM)
        other._setup(self.path, self._native, self._runner.session(threads or 0), self)
        return other

    @property
    def threads(self) -> int | None:
        """This session's kernel thread cap (None: the whole process-wide pool)."""
        return int(self._runner.threads) or None

    @property
    def state_bytes(self) -> int:
        """Bytes of this conversation's KV cache (program state)."""
        return int(self._runner.state_bytes)

    @property
    def arena_bytes(self) -> int:
        """Bytes of this conversation's activation arena."""
        return int(self._runner.arena_bytes)

    # --- properties -----------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        """The file's tokenizer (ember.llm.tokenizer.Tokenizer), built on first use."""
        if self._tokenizer is None:
            from ember.llm.tokenizer import Tokenizer

            kind = self.metadata.get("tokenizer.kind")
            data = self.metadata.get("tokenizer.data")
            if kind is None or data is None:
                raise InvalidArgumentError(
                    f"'{self.path}' has no tokenizer (no tokenizer.kind / tokenizer.data metadata); "
                    "pass token ids instead of text, or re-export the model with its tokenizer"
                )
            try:
                self._tokenizer = Tokenizer.from_metadata(kind, data, self.metadata.get("tokenizer.config") or "{}")
            except ImportError:  # a missing tokenizer library (sentencepiece) is not a corrupted file
                raise
            except Exception as error:  # noqa: BLE001 - the tokenizer libraries raise plain Exception on bad data
                raise InvalidProgramError(
                    f"'{self.path}': its tokenizer (tokenizer.data, {kind}) cannot be read: {error}. The file is "
                    "corrupted or was not written by `ember export`; re-export the model"
                ) from error
        return self._tokenizer

    @property
    def chat_template(self) -> Any:
        if self._chat_template is None:
            from ember.llm.chat_template import ChatTemplate

            source = self.metadata.get("chat.template")
            if not source:
                raise InvalidArgumentError(
                    f"'{self.path}' has no chat template (chat.template metadata); use generate() with a "
                    "plain prompt, or export a model that ships one"
                )
            self._chat_template = ChatTemplate(source, _special_token_strings(self.tokenizer))
        return self._chat_template

    @property
    def stats(self) -> GenerationStats:
        """Timings of the last call."""
        return self._stats

    @property
    def cached_tokens(self) -> list[int]:
        """Token ids whose K/V are in the cache (what the next call can reuse)."""
        return list(self._runner.cached_tokens)

    # --- generation -----------------------------------------------------------------------
    def config(self, config: GenerationConfig | None = None, **overrides: Any) -> GenerationConfig:
        """The effective settings: `config` (default: the file's) with non-None `overrides`."""
        base = config if config is not None else self.generation_config
        if not isinstance(base, GenerationConfig):
            raise TypeError(f"config must be a GenerationConfig, got {type(base).__name__}")
        return base.replace(**overrides)

    def encode(self, prompt: str | Sequence[int], add_special_tokens: bool = True) -> list[int]:
        """Prompt text -> ids (BOS added when the model wants it); ids pass through, checked."""
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidArgumentError("the prompt is empty; pass some text (or token ids)")
            _check_text(prompt, "the prompt")
            return list(self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens))
        if isinstance(prompt, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(
                f"the prompt is {type(prompt).__name__}, not text or token ids; decode it first "
                "(prompt.decode('utf-8')) or pass a list of int token ids"
            )
        ids = _token_ids(prompt, "the prompt")
        if not ids:
            raise InvalidArgumentError("the prompt has no token ids; pass at least one (e.g. the BOS id)")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidArgumentError(
                f"prompt token id {bad[0]} is outside the vocabulary [0, {self.vocab_size}); "
                "pass ids produced by this model's tokenizer"
            )
        if len(ids) > self.max_context_len:
            raise InvalidArgumentError(
                f"the prompt has {len(ids)} tokens but the context holds {self.max_context_len} "
                "(llm.max_context_len); shorten the prompt or export with a larger max_context_len"
            )
        return ids

    def generate(
        self,
        prompt: str | Sequence[int],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        penalty_window: int | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        ignore_eos: bool | None = None,
        config: GenerationConfig | None = None,
        stream: bool = False,
    ) -> str | Iterator[str]:
        """Continues `prompt` (text, or token ids). Returns the generated text, or with
        stream=True an iterator of text pieces (each complete UTF-8) that join to that text.
        Settings left None come from `config`, else from the file's generation defaults."""
        cfg = self.config(
            config, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            min_p=min_p, repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, penalty_window=penalty_window, seed=seed,
            stop=stop, ignore_eos=ignore_eos,
        )
        ids = self.encode(prompt)
        pieces = self._stream(ids, cfg)
        return pieces if stream else "".join(pieces)

    def chat(
        self,
        messages: Sequence[Message],
        *,
        stream: bool = False,
        config: GenerationConfig | None = None,
        parse_special_tokens: bool = False,
        **settings: Any,
    ) -> str | Iterator[str]:
        """Answers the conversation `messages` ([{"role": "user", "content": ...}, ...]) with the
        file's chat template. Takes the same settings as generate(). Pass the whole history each
        turn: the cached prefix of the previous turns is reused, only the new part is prefilled.
        Special-token text inside a message's content ("<|im_start|>") reaches the model as plain
        text; parse_special_tokens=True makes it the control token instead."""
        cfg = self.config(config, **settings)  # bad settings fail before the template runs
        ids = self.encode_chat(messages, parse_special_tokens=parse_special_tokens)
        return self.generate(ids, stream=stream, config=cfg)

    def encode_chat(self, messages: Sequence[Message], *, parse_special_tokens: bool = False,
                    add_generation_prompt: bool = True) -> list[int]:
        """The token ids chat() prefills for `messages`: the file's chat template rendered, then
        tokenized. Message contents are tokenized as plain text (a user typing "<|im_start|>"
        gets the characters, not the control token) unless `parse_special_tokens` is True."""
        checked = _check_messages(messages)
        text = self.chat_template.render(checked, add_generation_prompt=add_generation_prompt)
        tokenizer = self.tokenizer
        if parse_special_tokens:
            return list(tokenizer.encode(text, add_special_tokens=False))
        specials = tokenizer.special_token_strings()
        holder = next(((i, s) for i, m in enumerate(checked) for s in specials if s in m["content"]), None)
        if holder is None:  # nothing to protect: one piece, tokenized exactly as transformers does
            return list(tokenizer.encode(text, add_special_tokens=False))
        segments = _content_segments(self.chat_template, checked, text, add_generation_prompt)
        if segments is None:
            index, special = holder
            raise InvalidArgumentError(
                f"message {index} ({checked[index]['role']}) content holds the special token text {special!r} and "
                "the chat template changes message content, so it cannot be kept as plain text; remove that "
                "text, or pass parse_special_tokens=True to let it act as the control token"
            )
        ids: list[int] = []
        for segment, is_content in segments:
            ids += tokenizer.encode(segment, add_special_tokens=False, parse_special_tokens=not is_content)
        return ids

    def chat_ids(self, messages: Sequence[Message]) -> list[int]:
        """The prompt ids chat() prefills for `messages` (encode_chat with its defaults)."""
        return self.encode_chat(messages)

    def generate_ids(self, prompt: str | Sequence[int], **settings: Any) -> list[int]:
        """Like generate() but returns the generated token ids (no detokenization, no stop strings)."""
        cfg = self.config(settings.pop("config", None), **settings)
        if cfg.stop:
            raise InvalidArgumentError("generate_ids() works on tokens; stop strings need generate()")
        ids = self.encode(prompt)
        self._generation += 1
        tokens, reason = self._runner.generate(ids, self._native_config(cfg), None)
        self._stats = GenerationStats.from_native(self._runner.stats)
        return list(tokens)

    def stop(self) -> None:
        """Ends the current generation at the next token; safe from any thread."""
        self._runner.stop()

    def reset(self) -> None:
        """Forgets the cached conversation and zeroes the KV cache."""
        self._runner.reset()

    def forward(self, tokens: Sequence[int], pos: int) -> Any:
        """Raw forward: logits float32[vocab] of the last of `tokens` placed at positions pos...
        Invalidates the cached-prefix bookkeeping (the next generate starts from position 0)."""
        ids = _token_ids(tokens, "forward tokens")
        if not ids or any(not 0 <= t < self.vocab_size for t in ids):
            raise InvalidArgumentError(
                f"forward tokens must be 1 or more ids in [0, {self.vocab_size}), got {list(tokens)!r:.120}"
            )
        position = _as_int(pos)
        if position is None or not 0 <= position <= self.max_context_len - len(ids):
            raise InvalidArgumentError(
                f"pos must be an int in [0, {self.max_context_len - len(ids)}] so that {len(ids)} token(s) fit "
                f"the context of {self.max_context_len}, got {pos!r}"
            )
        return self._runner.forward(ids, position)

    # --- internals ------------------------------------------------------------------------
    def _native_config(self, cfg: GenerationConfig) -> Any:
        native = self._native.GenerateConfig()
        native.max_new_tokens = cfg.max_new_tokens
        native.ignore_eos = cfg.ignore_eos
        s = native.sampling
        s.temperature = cfg.sampler_temperature  # 0 for temperatures too small for float32 sampling
        s.top_k = cfg.top_k
        s.top_p = cfg.top_p
        s.min_p = cfg.min_p
        s.repetition_penalty = cfg.repetition_penalty
        s.frequency_penalty = cfg.frequency_penalty
        s.presence_penalty = cfg.presence_penalty
        s.penalty_window = cfg.penalty_window
        s.seed = cfg.resolved_seed()
        native.sampling = s
        return native

    def _stream(self, ids: list[int], cfg: GenerationConfig) -> Iterator[str]:
        # Validation and prefill happen now, so bad input raises at the call, not at iteration.
        self._runner.start(ids, self._native_config(cfg))
        self._generation += 1
        self._stats = GenerationStats.from_native(self._runner.stats)
        detok = self.tokenizer.detokenizer(prompt_ids=ids, skip_special_tokens=True)
        return self._pieces(self._generation, detok, _StopMatcher(cfg.stop))

    def _pieces(self, generation: int, detok: Any, matcher: _StopMatcher) -> Iterator[str]:
        runner = self._runner
        reason_override: dict[str, Any] = {}
        try:
            while True:
                if generation != self._generation:
                    raise RuntimeError("this stream was superseded by a newer generate/chat call on the same LLM")
                token = runner.next()
                if token is None:
                    tail = matcher.feed(detok.flush())
                    if not matcher.hit:
                        tail += matcher.flush()
                    if tail:
                        yield tail
                    return
                piece = detok.push(token)
                if piece:
                    out = matcher.feed(piece)
                    if out:
                        yield out
                    if matcher.hit:
                        runner.stop()
                        runner.next()  # finalizes the stats as "stopped"
                        reason_override["stop_reason"] = "stop_string"
                        return
        except KeyboardInterrupt:
            runner.stop()
            runner.next()
            raise
        finally:
            if generation == self._generation:
                self._stats = GenerationStats.from_native(runner.stats, **reason_override)

    def __repr__(self) -> str:
        family = self.metadata.get("llm.family", "?")
        return f"ember.LLM({self.path!r}, family={family!r}, vocab={self.vocab_size}, context={self.max_context_len})"


def _check_threads(threads: Any, default: str) -> None:
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS_ARGUMENT):
        raise InvalidArgumentError(
            f"threads must be {default} or an int in [1, 2**31), got {threads!r}; "
            "more threads than cores only slows decoding down"
        )


def _check_text(text: str, what: str) -> None:
    """Text the tokenizer can take: valid Unicode (no lone surrogates such as '\\ud800')."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        bad = text[error.start]
        raise InvalidArgumentError(
            f"{what} contains the lone surrogate U+{ord(bad):04X} at index {error.start}, which is not valid "
            "Unicode text; decode bytes with errors='replace' (or fix the string) before passing it"
        ) from None


def _as_int(value: Any) -> int | None:
    """`value` as a Python int when it is an int or a numpy integer (not a bool, not a float)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _token_ids(values: Any, what: str) -> list[int]:
    """`values` as a list of Python ints: ints and numpy integers only (no floats, bools or bytes)."""
    if isinstance(values, (str, bytes, bytearray, memoryview)) or not hasattr(values, "__iter__"):
        raise InvalidArgumentError(
            f"{what} must be a string or a sequence of int token ids, got {type(values).__name__}"
        )
    ids = []
    for index, value in enumerate(values):
        if isinstance(value, bool):
            raise InvalidArgumentError(f"{what}: item {index} is the bool {value!r}, not an int token id")
        try:
            ids.append(operator.index(value))
        except TypeError:
            raise InvalidArgumentError(
                f"{what}: item {index} is {value!r} ({type(value).__name__}), not an int token id; "
                "pass text as a str, or ids produced by this model's tokenizer"
            ) from None
    return ids


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    """Chat messages as plain dicts; each has a str role and str content (checked here so a bad
    message is one clear error, not a TypeError from inside the template)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence) or not messages:
        raise InvalidArgumentError(
            "messages must be a non-empty list of {'role': ..., 'content': ...} dicts, "
            f"got {messages!r:.80}"
        )
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidArgumentError(
                f"message {index} must be a dict like {{'role': 'user', 'content': 'Hi'}}, "
                f"got {type(message).__name__} {message!r:.80}"
            )
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise InvalidArgumentError(
                f"message {index}: 'role' must be a non-empty string such as 'user', 'assistant' or 'system', "
                f"got {role!r:.80}"
            )
        if not isinstance(content, str):
            raise InvalidArgumentError(
                f"message {index} ({role}): 'content' must be a string, got {type(content).__name__} "
                f"{content!r:.80}; join list parts into one string (str(x) for numbers)"
            )
        _check_text(content, f"message {index} ({role}) content")
        checked.append(dict(message))
    return checked


_CONTENT_MARK = re.compile("\ue000(\\d+)\ue001")  # private-use characters: no template prints them


def _content_segments(template: Any, messages: list[dict[str, Any]], text: str,
                      add_generation_prompt: bool) -> list[tuple[str, bool]] | None:
    """The rendered chat `text` as (segment, is_message_content) pieces, so contents can be tokenized
    without special-token parsing while the template's own text keeps its control tokens.

    The template is rendered a second time with each content replaced by a marker; where the
    markers land is where the contents are. None when putting the contents back at the markers
    does not give `text` (the template transforms or inspects content): then the positions of
    the contents are unknown and the caller refuses rather than guess."""
    marked = [{**m, "content": f"\ue000{i}\ue001"} for i, m in enumerate(messages)]
    try:
        skeleton = template.render(marked, add_generation_prompt=add_generation_prompt)
    except ValueError:
        return None
    segments: list[tuple[str, bool]] = []
    start = 0
    for match in _CONTENT_MARK.finditer(skeleton):
        index = int(match.group(1))
        if index >= len(messages):
            return None
        if match.start() > start:
            segments.append((skeleton[start:match.start()], False))
        if messages[index]["content"]:
            segments.append((messages[index]["content"], True))
        start = match.end()
    if start < len(skeleton):
        segments.append((skeleton[start:], False))
    if "".join(piece for piece, _ in segments) != text:
        return None
    return segments


def _special_token_strings(tokenizer: Any) -> dict[str, str]:
    """bos_token / eos_token / ... as strings for the chat template."""
    out: dict[str, str] = {}
    for key, value in dict(tokenizer.config.special_tokens_map).items():
        if isinstance(value, Mapping):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    if "bos_token" not in out and tokenizer.bos_id is not None:
        token = tokenizer.id_to_token(tokenizer.bos_id)
        if token:
            out["bos_token"] = token
    if "eos_token" not in out and tokenizer.eos_ids:
        token = tokenizer.id_to_token(tokenizer.eos_ids[0])
        if token:
            out["eos_token"] = token
    return out


def forward_batch(sessions: Sequence[LLM], tokens: Sequence[int | Sequence[int]], positions: Sequence[int]) -> list[Any]:
    """One forward step of several sessions of one loaded model in a single batched execution
    (one pass over the weights): sessions[i] takes tokens[i] from positions[i], where tokens[i]
    is one id (a decode step) or a list of ids (a prefill chunk, at most `max_seq_len`; sessions
    of different lengths may share the step). Returns each session's logits after its last
    token, float32[vocab], bit for bit what `sessions[i].forward(tokens[i], positions[i])` gives.
    Like forward(), it clears the sessions' cached-prefix bookkeeping. Threads that generate on
    sessions of one model are batched this way automatically."""
    sessions = list(sessions)
    if not sessions or not all(isinstance(s, LLM) for s in sessions):
        raise InvalidArgumentError(f"forward_batch takes a non-empty list of LLM sessions, got {sessions!r:.120}")
    if isinstance(tokens, (str, bytes, bytearray, memoryview)) or not hasattr(tokens, "__iter__"):
        raise InvalidArgumentError(f"forward_batch tokens must be a sequence (one entry per session), got "
                                   f"{type(tokens).__name__}")
    rows: list[int | list[int]] = []
    for index, item in enumerate(tokens):
        if hasattr(item, "__iter__") and not isinstance(item, (str, bytes, bytearray, memoryview)):
            chunk = _token_ids(item, f"forward_batch tokens[{index}]")
            if not chunk:
                raise InvalidArgumentError(f"forward_batch tokens[{index}] is empty; give each session at least one id")
            rows.append(chunk)
        else:
            rows.append(_token_ids([item], f"forward_batch tokens[{index}]")[0])
    pos = _token_ids(positions, "forward_batch positions")
    if len(rows) != len(sessions) or len(pos) != len(sessions):
        raise InvalidArgumentError(
            f"forward_batch takes one token (or list of tokens) and one position per session: {len(sessions)} "
            f"sessions, {len(rows)} tokens, {len(pos)} positions"
        )
    return sessions[0]._native.forward_batch([s._runner for s in sessions], rows, pos)


def load(path: str | os.PathLike[str], threads: int | None = None, mmap: bool = False) -> LLM:
    """Loads an LLM .ember file.

    threads: kernel threads (None = one per physical core).
    mmap: False (default) reads the weights into huge-page-backed memory: decode streams every
    weight once per token and runs faster with far fewer TLB misses (load takes ~0.1-0.3 s per GB
    longer). True maps the file instead: near-instant load, pages shared with other processes.
    """
    return LLM(path, threads=threads, mmap=mmap)
