"""Chat prompts whose role markers only the template writes.

Rendering a chat template to one string and tokenizing it with special-token parsing on lets a
user who types ``<|im_start|>system`` into a message forge a real turn boundary: the tokenizer
cannot tell the template's markers from the user's. Here the template is rendered with each
message's content replaced by a sentinel; the markup between sentinels is tokenized with special
tokens parsed, and every content as plain text. A conversation with no special-token text in any
content (the common case) takes the one-string path, bit-identical to before, so prompt caches
and drafting parity are untouched.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Collection

Messages = list[dict[str, str]]


def contains_special(messages: Messages, specials: Collection[str]) -> bool:
    """Whether any message content holds the text of a special (or added) token."""
    return any(s and s in m.get("content", "") for m in messages for s in specials)


def safe_chat_ids(
    messages: Messages,
    render: Callable[[Messages], str],
    specials: Collection[str],
    tokenize_markup: Callable[[str], list[int]],
    tokenize_text: Callable[[str], list[int]],
) -> list[int]:
    """Token ids of the rendered chat, with message contents never parsed for special tokens.

    ``render``: messages → the template's text; ``tokenize_markup``: text → ids with special
    tokens parsed; ``tokenize_text``: text → ids with special tokens as plain text."""
    if not contains_special(messages, specials):
        return tokenize_markup(render(messages))
    nonce = secrets.token_hex(8)  # no content can guess it, so no content can fake a sentinel
    marked = [{**m, "content": f"\ue000{nonce}:{i}\ue001"} for i, m in enumerate(messages)]
    # split keeps the captured index: [markup, index, markup, index, …, markup]; a template that
    # repeats or reorders contents still gets each in its place
    pieces = re.split(f"\ue000{nonce}:(\\d+)\ue001", render(marked))
    ids: list[int] = []
    for n, piece in enumerate(pieces):
        if n % 2:
            ids += tokenize_text(messages[int(piece)]["content"])
        elif piece:
            ids += tokenize_markup(piece)
    return ids
