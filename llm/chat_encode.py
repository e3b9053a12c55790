"""Chat prompt -> token ids, with message text kept as plain text.

A chat template renders role markers as special-token strings (``<|im_start|>user``) and the
messages' text in between. Encoding the rendered string as a whole would also turn any such
string *inside a message* into a control token: a user could then forge a system turn. Here the
messages' text is located in the rendered prompt and encoded as plain text (special-token
strings in it become ordinary pieces), while the template's own text keeps its special tokens.

When no message contains an added-token string, the prompt is encoded in one piece exactly as
before (same ids as ``tokenizer.encode(rendered)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["encode_chat"]


def encode_chat(tokenizer: Any, rendered: str, messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Ids of the `rendered` chat prompt, where each message's string content is plain text."""
    specials = tokenizer.added_token_strings()
    contents = [m.get("content") for m in messages]
    texts = [c for c in contents if isinstance(c, str) and c]
    if not any(s in text for text in texts for s in specials):
        return list(tokenizer.encode(rendered, add_special_tokens=False))
    ids: list[int] = []
    cursor = 0
    for text in texts:
        at = rendered.find(text, cursor)
        if at < 0:
            # The template changed this text (e.g. trimmed it). Plain text then stays in the
            # template's part, encoded as before; a special-token string could not be kept plain.
            if any(s in text for s in specials):
                raise ValueError(
                    "a message contains a special-token string and the chat template does not copy the "
                    "message verbatim, so it cannot be kept as plain text; remove the token string from "
                    "the message"
                )
            continue
        if at > cursor:
            ids += tokenizer.encode(rendered[cursor:at], add_special_tokens=False)
        ids += tokenizer.encode_plain(text)
        cursor = at + len(text)
    if cursor < len(rendered):
        ids += tokenizer.encode(rendered[cursor:], add_special_tokens=False)
    return ids
