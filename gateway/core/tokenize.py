"""Chat templating and tokenization off the event loop.

A long prompt (a conversation, or instructions near their cap) takes the template engine and the
tokenizer tens of milliseconds to seconds; on the event loop that freezes every socket, pings
included. One worker thread does it instead: one, because a Hugging Face fast tokenizer is not
safe to encode from two threads at once ("Already borrowed"), prompts are then tokenized in
arrival order, and a flood of huge prompts costs the process one thread's worth of CPU at most.
Not the engine's thread: a big prompt there would stall every running response's next step.

The thread takes its work by priority: the event loop's own synchronous token counts first (the
loop is blocked until they are done, so they must never queue behind a flood of big prompts), then
conversations, then raw text prompts; a raw prompt too long for the context is refused after a
bounded head of it is tokenized, so no one job holds the thread for long.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class ChatTokenizer(Protocol):
    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]: ...


COUNT, CHAT, TEXT = 0, 1, 2  # job priorities: the loop waiting on a count, a conversation, a raw prompt
HEAD_CHARS_PER_TOKEN = 16  # a raw prompt over this many characters per token of context is tried by its head first


class _PriorityWorker:
    """One thread running submitted calls, lowest priority value first, then in arrival order."""

    def __init__(self, name: str):
        self.name = name
        self._jobs: queue.PriorityQueue[tuple[int, int, Callable[[], Any], Future[Any]]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._started = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], *args: Any, priority: int = CHAT) -> Future[T]:
        future: Future[T] = Future()
        self._jobs.put((priority, next(self._order), lambda: fn(*args), future))
        with self._lock:
            if not self._started:
                threading.Thread(target=self._run, name=self.name, daemon=True).start()
                self._started = True
        return future

    def _run(self) -> None:
        while True:
            _, _, call, future = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:  # the caller's to handle, as with an executor
                    future.set_exception(exc)


# Normal OS priority, unlike the grammar thread: the event loop waits on this one synchronously to
# count a conversation item's tokens (count_tokens), and a low-priority thread would stretch that wait.
_POOL = _PriorityWorker("tokenize")


class TokenizingCount(Protocol):
    tokenizing: int  # admitted responses not yet submitted (Services.engine_has_room counts them)


class PromptHost(TokenizingCount, Protocol):
    @property
    def local_backend(self) -> ChatTokenizer | None: ...  # None: the engine tokenizes (a remote one)


async def prompt_tokens(host: PromptHost, messages: list[dict[str, str]]) -> list[int] | None:
    """The prompt of ``messages`` tokenized off the loop, or None where the engine takes messages."""
    tokenizer = host.local_backend
    return None if tokenizer is None else await chat_tokens(tokenizer, messages, host)


async def chat_tokens(backend: ChatTokenizer, messages: list[dict[str, str]], holder: TokenizingCount) -> list[int]:
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
    return len(_POOL.submit(backend.encode, text, priority=COUNT).result()) if text else 0


class TooManyTokens(Exception):
    """A raw prompt whose head alone is past the context: the rest was not tokenized."""

    def __init__(self, at_least: int, limit: int):
        super().__init__(f"prompt is more than {at_least} tokens; the model's context is {limit}")


def encode_within(encode: Callable[[str], list[int]], text: str, limit: int) -> list[int]:
    """``encode(text)``; a text long enough to be past ``limit`` tokens is tried by its head first, and
    refused (``TooManyTokens``) when the head alone is: a text far past the context costs its head's work."""
    head_chars = HEAD_CHARS_PER_TOKEN * limit
    if len(text) > head_chars:
        head = encode(text[:head_chars])
        if len(head) > limit + 1:  # cutting the text changes at most the last token or so
            raise TooManyTokens(len(head) - 1, limit)
    return encode(text)


async def text_tokens(
    encode: Callable[[str], list[int]], texts: list[str], holder: TokenizingCount, limit: int
) -> list[list[int]]:
    """``encode`` of each text (a raw ``/v1/completions`` prompt) on the tokenizer thread, after chat and
    counts; one request's prompts one job each, counted once in ``holder.tokenizing`` as they wait.
    ``limit``: the context; a prompt past it may raise ``TooManyTokens`` (``encode_within``)."""
    holder.tokenizing += 1
    try:
        out = []
        for t in texts:
            out.append(await asyncio.wrap_future(_POOL.submit(encode_within, encode, t, limit, priority=TEXT)))
        return out
    finally:
        holder.tokenizing -= 1


async def on_tokenizer_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the tokenizer's one thread (any other use of the tokenizer, e.g. counting a tool's output)."""
    return await asyncio.wrap_future(_POOL.submit(fn, *args))
