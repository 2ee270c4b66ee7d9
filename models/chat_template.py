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
from functools import lru_cache

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


def _trie_pattern(words: Collection[str]) -> str:
    """A regex matching any of ``words``, shaped as their trie: at each position the engine follows
    one path of at most the longest word's length, never every word in turn (a vocabulary with 256
    ``<|reserved_special_token_N|>`` would otherwise cost 256 comparisons a character)."""
    trie: dict[str, dict] = {}  # type: ignore[type-arg]
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:  # type: ignore[type-arg]
        ends = "" in node
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if ends else body  # greedy: the longer word first, the shorter on failure

    return emit(trie)


@lru_cache(maxsize=8)
def _special_regex(specials: frozenset[str]) -> re.Pattern[str] | None:
    words = [s for s in specials if s]
    return re.compile(_trie_pattern(words)) if words else None


def split_specials(text: str, specials: frozenset[str]) -> list[tuple[str, bool]]:
    """``text`` as ``[(piece, is_special)]``: each leftmost special-token text (the longest where
    several start there) cut out, in one pass linear in ``len(text)``. Tokenizing the pieces
    apart is what a tokenizer with special-token parsing does, without its cost per marker: one
    such tokenizer's split took time growing with the square of the number of markers."""
    pattern = _special_regex(specials)
    if pattern is None:
        return [(text, False)] if text else []
    out: list[tuple[str, bool]] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.append((text[pos : m.start()], False))
        out.append((m.group(), True))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], False))
    return out
