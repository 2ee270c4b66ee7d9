"""Chat templating and tokenization off the event loop.

A long prompt (a conversation, or instructions near their cap) takes the template engine and the
tokenizer tens of milliseconds to seconds; on the event loop that freezes every socket, pings
included. One worker thread does it instead: one, because a Hugging Face fast tokenizer is not
safe to encode from two threads at once ("Already borrowed"), prompts are then tokenized in
arrival order, and a flood of huge prompts costs the process one thread's worth of CPU at most.
Not the engine's thread: a big prompt there would stall every running response's next step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class ChatTokenizer(Protocol):
    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]: ...


# Normal priority, unlike the grammar thread: the event loop waits on this one synchronously to count
# a conversation item's tokens (count_tokens), and a low-priority thread would stretch that wait.
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")


class Tokenizing(Protocol):
    tokenizing: int  # admitted responses not yet submitted (Services.engine_has_room counts them)


async def chat_tokens(backend: ChatTokenizer, messages: list[dict[str, str]], holder: Tokenizing) -> list[int]:
    """``backend.chat_tokens(messages)`` on the tokenizer thread; the loop stays free meanwhile.
    ``holder.tokenizing`` counts the prompt while it waits, so admission sees it as queued work."""
    holder.tokenizing += 1
    try:
        return await asyncio.wrap_future(_POOL.submit(backend.chat_tokens, messages))
    finally:
        holder.tokenizing -= 1


class TextEncoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


def count_tokens(backend: TextEncoder, text: str) -> int:
    """Tokens of ``text`` (a conversation item's, for truncation estimates), on the tokenizer thread: a
    Hugging Face fast tokenizer must not encode from two threads at once. Blocks the caller; items are short
    and each is counted once (gateway.realtime.session caches the counts)."""
    return len(_POOL.submit(backend.encode, text).result()) if text else 0


async def text_tokens(encode: Callable[[str], list[int]], texts: list[str], holder: Tokenizing) -> list[list[int]]:
    """``encode`` of each text (a raw ``/v1/completions`` prompt) on the same tokenizer thread as chat:
    one request's prompts in one task, counted once in ``holder.tokenizing`` as they wait."""
    holder.tokenizing += 1
    try:
        return await asyncio.wrap_future(_POOL.submit(lambda: [encode(t) for t in texts]))
    finally:
        holder.tokenizing -= 1


async def on_tokenizer_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the tokenizer's one thread (any other use of the tokenizer, e.g. counting a tool's output)."""
    return await asyncio.wrap_future(_POOL.submit(fn, *args))
