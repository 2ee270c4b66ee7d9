"""The gateway without a socket: the same engine, scheduler and limits, called from Python.

::

    from gateway import StreamOmni

    async with StreamOmni() as so:                    # StreamOmni("my.yaml") for a config file
        async for chunk in so.stream(messages, temperature=0, max_output_tokens=64):
            print(chunk.text, end="")                  # chunk.token_ids, chunk.is_final, chunk.metrics (final)
        text = await so.generate(messages, on_chunk=callback)

``messages`` are Chat Completions messages (``{"role", "content"}``, content a string or a list
of ``text`` / ``input_audio`` / ``image_url`` parts), checked by the same schema; the options are
the Chat Completions ones under the Realtime names where they differ (``max_output_tokens``).
Each chunk is one chunk of the scheduler, exactly what the HTTP and WebSocket APIs send.

Cancelling the task that consumes a stream cancels the response within one model step; so does
``stream.cancel()``, closing it (``aclose()``), or dropping it unfinished.
"""

from __future__ import annotations

import asyncio
import inspect
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from models.backend import Backend
from models.decode import JobEvents
from models.engine_client import EngineBusy, Handle

from ..core.config import Config, load_config
from ..core.engine_events import AsyncSink
from ..core.filters import FILTER_FAILED, ResponseFilter
from ..core.services import Services
from ..core.tokenize import prompt_tokens
from ..http import chat_completions, jobs
from ..http.chat_parts import chat_messages
from ..http.error_bodies import ApiError
from ..http.schemas import ChatRequest
from .startup import start_services, stop_services

FINISH = {"stop": "stop", "length": "length"}  # Done.reason → finish_reason; others pass as they are


class StreamOmniError(Exception):
    """A refused or failed response: ``code`` as the HTTP API's error codes, a one-line ``message``."""

    def __init__(self, code: str, message: str, param: str | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.param = param


@dataclass(frozen=True)
class StreamChunk:
    text: str  # this chunk's text ("" only on a final chunk with nothing left to show)
    token_ids: tuple[int, ...]  # the generated ids this chunk's text came from
    is_final: bool = False  # the last chunk of the response
    finish_reason: str | None = None  # on the final chunk: stop | length | content_filter | cancelled | error
    metrics: dict[str, Any] | None = None  # on the final chunk: ttft_ms, tokens, tokens_per_s … (DecodeJob)


ChunkCallback = Callable[[StreamChunk], Awaitable[None] | None]


class StreamOmni:
    """One engine and model for this process's lifetime: ``async with StreamOmni(...) as so``."""

    def __init__(
        self,
        config: str | Path | Config | None = None,
        *,
        backend: Backend | None = None,
        **overrides: Any,
    ):
        """``config``: a YAML path or a ``Config`` (None: the defaults); ``overrides``: dotted keys as
        ``load_config`` takes them (``**{"session.max_output_tokens": 64}``); ``backend``: an
        already built backend instead of the configured one (tests)."""
        if isinstance(config, Config):
            if overrides:
                raise TypeError("overrides go with a config path, not a Config object")
            self.config = config
        else:
            self.config = load_config(config, **overrides)
        self._backend = backend
        self._svc: Services | None = None

    @property
    def services(self) -> Services:
        if self._svc is None:
            raise RuntimeError("StreamOmni is not started: use `async with StreamOmni(...) as so`")
        return self._svc

    async def start(self) -> StreamOmni:
        if self._svc is None:
            given = self._backend
            self._svc = await start_services(self.config, None if given is None else (lambda _c: given))
        return self

    async def close(self) -> None:
        svc, self._svc = self._svc, None
        if svc is not None:
            await asyncio.to_thread(stop_services, svc)  # joins the engine thread: not on the loop

    async def __aenter__(self) -> StreamOmni:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def stream(self, messages: list[dict[str, Any]], **options: Any) -> ResponseStream:
        """A response as an async iterator of ``StreamChunk``. Options: ``temperature``, ``top_p``,
        ``seed``, ``max_output_tokens``, ``stop``, ``scheduler`` (``{"strategy", "task_hint", …}``) and
        the sampling knobs of Chat Completions (``frequency_penalty``, ``logit_bias``, ``top_k``, DRY …:
        docs/API.md's request keys); an unknown option raises ``StreamOmniError``."""
        return ResponseStream(self.services, messages, options)

    async def generate(
        self, messages: list[dict[str, Any]], on_chunk: ChunkCallback | None = None, **options: Any
    ) -> str:
        """The whole text; ``on_chunk`` (sync or async) sees every chunk first, the final one included."""
        parts = []
        async with self.stream(messages, **options) as chunks:
            async for chunk in chunks:
                parts.append(chunk.text)
                if on_chunk is not None:
                    result = on_chunk(chunk)
                    if inspect.isawaitable(result):
                        await result
        return "".join(parts)


class ResponseStream:
    """One response: iterate it for chunks. The job starts at the first ``__anext__``."""

    def __init__(self, svc: Services, messages: list[dict[str, Any]], options: dict[str, Any]):
        self.svc = svc
        self._messages = messages
        self._options = options
        self.job: jobs.Job | None = None
        self._handle: Handle | None = None
        self._queue: asyncio.Queue[tuple[int, JobEvents]] = asyncio.Queue()
        self._ready: deque[StreamChunk] = deque()
        self._ids: deque[int] = deque()  # generated ids not yet given to a chunk
        self._done = False  # the final chunk is made
        self.id = f"resp_{secrets.token_hex(12)}"
        self._filter = ResponseFilter(svc.filters, None, self.id)
        self._error: StreamOmniError | None = None  # raised instead of a final chunk

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> StreamChunk:
        try:
            if self._handle is None and not self._done:
                await self._start()
            while not self._ready:
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                if self._done:
                    raise StopAsyncIteration
                _, events = await self._queue.get()
                self._take(events)
        except asyncio.CancelledError:  # the consumer was cancelled: so is the response
            self.cancel()
            raise
        return self._ready.popleft()

    def cancel(self) -> None:
        """Stop the response (within one model step); thread-safe and idempotent."""
        if self._handle is not None and not self._done:
            if not self._handle.cancelled.is_set():
                self._handle.cancel()
                self.svc.metrics.cancels.inc()
        self._done = self._done or self._handle is None

    async def aclose(self) -> None:
        self.cancel()

    async def __aenter__(self) -> ResponseStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and not self._done:
            handle.cancel()  # dropped unfinished (a `break` out of the loop): nobody reads the rest

    async def _start(self) -> None:
        svc = self.svc
        o = dict(self._options)
        body: dict[str, Any] = {"model": svc.backend.name, "messages": self._messages}
        if "max_output_tokens" in o:
            body["max_tokens"] = o.pop("max_output_tokens")
        body.update(o)
        try:
            req = ChatRequest.model_validate(body)
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(x) for x in first["loc"])
            raise StreamOmniError("invalid_value", f"{where}: {first['msg']}", where) from None
        try:
            messages = await chat_messages(svc, req.messages)
            prompt = await prompt_tokens(svc, messages)  # off the loop
            self.job = chat_completions.chat_job(svc, req, messages, prompt)
        except ApiError as exc:
            raise StreamOmniError(exc.code, exc.message, exc.param) from None
        try:
            self._handle = svc.engine.submit(self.job, AsyncSink(asyncio.get_running_loop(), self._queue, 0))
        except EngineBusy:
            raise StreamOmniError("server_busy", "the engine is at capacity; retry shortly") from None

    def _take(self, events: JobEvents) -> None:
        self._ids.extend(events.tokens)
        shown: list[tuple[str, int]] = []  # (text as the filters let it through, tokens)
        for c in events.chunks:
            text = self._filter.check(c.text) if c.text else ""
            if text is None:  # a filter stopped it: the job's done (within a step) ends the stream
                if self._handle is not None:
                    self._handle.cancel()
            elif text:
                shown.append((text, c.tokens))
        for text, n in shown[:-1] if events.done is not None else shown:
            self._ready.append(StreamChunk(text, tuple(self._ids.popleft() for _ in range(min(n, len(self._ids))))))
        done = events.done
        if done is None:
            return
        jobs.finished(self.svc, done, self.id, "chat")
        self._done = True
        if self._filter.error is not None:
            self._error = StreamOmniError(FILTER_FAILED, self._filter.error)
            return
        last = shown[-1][0] if shown else ""
        ids = tuple(self._ids)
        self._ids.clear()
        reason = self._filter.reason or FINISH.get(done.reason, done.reason)
        self._ready.append(StreamChunk(last, ids, True, reason, done.metrics))
