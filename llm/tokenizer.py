"""Tokenizer embedded in a .ember file, and a UTF-8-safe incremental detokenizer.

No torch: only ``tokenizers`` (HF tokenizer.json) or ``sentencepiece`` (.model) + json.
The metadata contract written by ``export_llm``:
  - ``tokenizer.kind``:   "hf_json" | "sentencepiece"
  - ``tokenizer.data``:   bytes of tokenizer.json, or of the sentencepiece .model
  - ``tokenizer.config``: JSON object with ``bos_id``, ``eos_ids``, ``pad_id``,
    ``add_bos_token``, ``add_eos_token``, ``special_tokens_map`` and
    ``all_special_ids`` (any key may be absent/None).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

__all__ = ["TokenizerKind", "TokenizerConfig", "Tokenizer", "IncrementalDetokenizer"]


class TokenizerKind(str, Enum):
    HF_JSON = "hf_json"
    SENTENCEPIECE = "sentencepiece"

    @classmethod
    def parse(cls, value: "TokenizerKind | str") -> "TokenizerKind":
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"tokenizer kind {value!r} is unknown; expected one of {[k.value for k in cls]}"
            ) from None


@dataclass(frozen=True)
class TokenizerConfig:
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    pad_id: int | None = None
    add_bos_token: bool | None = None  # None: the tokenizer's own post-processor decides (hf_json)
    add_eos_token: bool = False
    special_tokens_map: dict[str, Any] = field(default_factory=dict)
    all_special_ids: tuple[int, ...] = ()

    @classmethod
    def from_json(cls, text: str) -> "TokenizerConfig":
        try:
            raw = json.loads(text) if text else {}
        except json.JSONDecodeError as error:
            raise ValueError(f"tokenizer.config is not valid JSON ({error}); re-export the model") from None
        if not isinstance(raw, dict):
            raise ValueError(f"tokenizer.config must be a JSON object, got {type(raw).__name__}")
        eos = raw.get("eos_ids") or []
        return cls(
            bos_id=raw.get("bos_id"),
            eos_ids=tuple(int(i) for i in (eos if isinstance(eos, list) else [eos])),
            pad_id=raw.get("pad_id"),
            add_bos_token=raw.get("add_bos_token"),
            add_eos_token=bool(raw.get("add_eos_token", False)),
            special_tokens_map=dict(raw.get("special_tokens_map") or {}),
            all_special_ids=tuple(int(i) for i in raw.get("all_special_ids") or []),
        )


class _Backend(Protocol):
    vocab_size: int

    def encode(self, text: str, add_special_tokens: bool, parse_special_tokens: bool = True) -> list[int]: ...
    def special_token_strings(self) -> tuple[str, ...]: ...
    def decode(self, ids: Sequence[int], skip_special_tokens: bool) -> str: ...
    def token_to_id(self, token: str) -> int | None: ...
    def id_to_token(self, token_id: int) -> str | None: ...
    def added_token_strings(self) -> tuple[str, ...]: ...


def _release_freed_heap() -> None:
    """Hands the heap that parsing a tokenizer.json freed back to the OS (glibc keeps it otherwise:
    SmolLM2's 3.3 MiB JSON leaves ~50 MiB resident for a 15 MiB tokenizer). No-op elsewhere."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        pass


class _HFJsonBackend:
    def __init__(self, data: bytes, config: TokenizerConfig) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self._data = data
        self._tok = HFTokenizer.from_str(data.decode("utf-8"))
        self._tok_as_text: Any = None  # built on first use, see _as_text
        self._config = config
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        _release_freed_heap()

    def _as_text(self) -> Any:
        """A second instance that reads special-token text as plain text (a per-instance flag in
        `tokenizers`; two instances rather than toggling one keep encode() thread-safe). Built on
        first use (chat content; ~10 MiB): only published once its flag is set, so threads that race
        here at worst build it twice."""
        if self._tok_as_text is None:
            from tokenizers import Tokenizer as HFTokenizer

            tok = HFTokenizer.from_str(self._data.decode("utf-8"))
            tok.encode_special_tokens = True
            self._tok_as_text = tok
            _release_freed_heap()
        return self._tok_as_text

    def encode(self, text: str, add_special_tokens: bool, parse_special_tokens: bool = True) -> list[int]:
        tok = self._tok if parse_special_tokens else self._as_text()
        ids = tok.encode(text, add_special_tokens=add_special_tokens).ids
        # tokenizer.json's post-processor already adds BOS where the model wants it; only
        # an explicit add_bos_token=True without one in the post-processor needs help.
        if add_special_tokens and self._config.add_bos_token and self._config.bos_id is not None:
            if not ids or ids[0] != self._config.bos_id:
                ids = [self._config.bos_id, *ids]
        return ids

    def special_token_strings(self) -> tuple[str, ...]:
        return tuple(t.content for t in self._tok.get_added_tokens_decoder().values() if t.special and t.content)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def added_token_strings(self) -> tuple[str, ...]:
        return tuple(t.content for t in self._tok.get_added_tokens_decoder().values() if t.content)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)


class _SentencePieceBackend:
    def __init__(self, data: bytes, config: TokenizerConfig) -> None:
        import sentencepiece

        self._sp = sentencepiece.SentencePieceProcessor()
        self._sp.LoadFromSerializedProto(data)
        self._config = config
        self.vocab_size = self._sp.GetPieceSize()
        special = set(config.all_special_ids)
        special.update(i for i in (self._sp.bos_id(), self._sp.eos_id(), self._sp.pad_id(), self._sp.unk_id()) if i >= 0)
        special.discard(self._sp.unk_id())  # <unk> is text-like: HF keeps it when skipping specials
        self._special = frozenset(special)

    def encode(self, text: str, add_special_tokens: bool, parse_special_tokens: bool = True) -> list[int]:
        # sentencepiece never turns control-symbol text ("<s>") into the control id: text is text.
        ids = list(self._sp.EncodeAsIds(text))
        if add_special_tokens:
            add_bos = self._config.add_bos_token if self._config.add_bos_token is not None else True
            bos = self._config.bos_id if self._config.bos_id is not None else self._sp.bos_id()
            if add_bos and bos is not None and bos >= 0:
                ids.insert(0, bos)
            if self._config.add_eos_token and self._config.eos_ids:
                ids.append(self._config.eos_ids[0])
        return ids

    def special_token_strings(self) -> tuple[str, ...]:
        return ()  # see encode(): nothing to keep from being parsed

    def decode(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        ids = [i for i in ids if not (skip_special_tokens and i in self._special)]
        return self._sp.DecodeIds(ids)

    def added_token_strings(self) -> tuple[str, ...]:
        return ()  # SentencePiece encodes control-token strings in text as plain pieces

    def token_to_id(self, token: str) -> int | None:
        token_id = self._sp.PieceToId(token)
        if token_id == self._sp.unk_id() and token != self._sp.IdToPiece(token_id):
            return None
        return token_id

    def id_to_token(self, token_id: int) -> str | None:
        if 0 <= token_id < self.vocab_size:
            return self._sp.IdToPiece(token_id)
        return None


_BACKENDS: dict[TokenizerKind, type] = {
    TokenizerKind.HF_JSON: _HFJsonBackend,
    TokenizerKind.SENTENCEPIECE: _SentencePieceBackend,
}


class Tokenizer:
    """The tokenizer of an exported model, rebuilt from the file's metadata."""

    def __init__(self, kind: TokenizerKind, backend: _Backend, config: TokenizerConfig) -> None:
        self.kind = kind
        self._backend = backend
        self.config = config

    @classmethod
    def from_metadata(cls, kind: str | TokenizerKind, data: bytes, config_json: str = "{}") -> "Tokenizer":
        kind = TokenizerKind.parse(kind)
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
            raise ValueError("tokenizer.data is empty; the file has no tokenizer — re-export with a tokenizer")
        config = TokenizerConfig.from_json(config_json)
        return cls(kind, _BACKENDS[kind](bytes(data), config), config)

    @property
    def bos_id(self) -> int | None:
        return self.config.bos_id

    @property
    def eos_ids(self) -> list[int]:
        return list(self.config.eos_ids)

    @property
    def pad_id(self) -> int | None:
        return self.config.pad_id

    @property
    def vocab_size(self) -> int:
        return self._backend.vocab_size

    def encode(self, text: str, add_special_tokens: bool = True, parse_special_tokens: bool = True) -> list[int]:
        """Text -> ids. `parse_special_tokens`: special-token text ("<|im_start|>") becomes its control
        id (True, transformers' default) or is tokenized as the characters it is (False)."""
        if not isinstance(text, str):
            raise TypeError(f"Tokenizer.encode takes a str, got {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"the text holds the lone surrogate U+{ord(text[error.start]):04X} at index {error.start}, "
                "which is not valid Unicode; fix the string before tokenizing it"
            ) from None
        return self._backend.encode(text, add_special_tokens, parse_special_tokens)

    def special_token_strings(self) -> tuple[str, ...]:
        """The text of every special token the tokenizer would turn into a control id."""
        return self._backend.special_token_strings()

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._backend.decode(list(ids), skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def added_token_strings(self) -> tuple[str, ...]:
        """Strings that encode() turns into added/special token ids when they occur in text."""
        return self._backend.added_token_strings()

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(token_id)

    def detokenizer(self, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True) -> "IncrementalDetokenizer":
        return IncrementalDetokenizer(self, prompt_ids=prompt_ids, skip_special_tokens=skip_special_tokens)


class IncrementalDetokenizer:
    """Turns a stream of token ids into text pieces that are always complete UTF-8.

    It decodes a small window of recent ids twice, with and without the newest ones,
    and emits the difference once it does not end in U+FFFD (a partial multi-byte
    character split across byte-level tokens). Decoding windows rather than single
    tokens keeps sentencepiece's leading-space handling right ("▁world" after "Hello"
    yields " world"). Seed with the prompt's ids so the first generated token gets
    its leading space too. ``flush()`` returns what is left at the end of the stream.
    """

    _CONTEXT = 6  # prompt ids kept as left context; also bounds how much history is kept

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        seed = list(prompt_ids)[-self._CONTEXT :]
        self._ids: list[int] = seed
        self._prefix = 0  # window start
        self._read = len(seed)  # ids before this are already emitted

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_id: int) -> str:
        """Add one id; returns the newly completed text (possibly '')."""
        self._ids.append(int(token_id))
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        full_text = self._decode(self._ids[self._prefix :])
        if full_text.endswith("\ufffd") or len(full_text) <= len(prefix_text):
            return ""  # an incomplete character, or nothing visible yet
        piece = full_text[len(prefix_text) :]
        self._prefix = self._read
        self._read = len(self._ids)
        # Keep the window small: drop ids that can no longer affect decoding.
        if self._prefix > 4 * self._CONTEXT:
            del self._ids[: self._prefix]
            self._read -= self._prefix
            self._prefix = 0
        return piece

    def __call__(self, token_ids: Iterable[int]) -> Iterator[str]:
        for token_id in token_ids:
            piece = self.push(token_id)
            if piece:
                yield piece

    def flush(self) -> str:
        """Emit whatever is pending (an invalid byte sequence becomes U+FFFD)."""
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        full_text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return full_text[len(prefix_text) :] if len(full_text) > len(prefix_text) else ""
