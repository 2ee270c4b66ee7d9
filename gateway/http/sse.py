"""Resumable SSE for ``/v1/chat/completions``: numbered frames in a bounded buffer, readers that come and go.

A streamed completion does not belong to its HTTP connection. Its frames (``id: <completion>:<n>``)
go to a ``CompletionStream``; each SSE response is a reader of it from some ``n`` on. When the
last reader leaves before ``[DONE]`` was delivered, the completion keeps decoding for its grace
period; a reader that comes back within it gets every frame after its ``Last-Event-ID``. After
the grace period the job is cancelled and the frames are freed.

Memory is bounded twice: a stream keeps at most ``max_bytes`` of frames (oldest dropped first; a
reader who needs a dropped one gets ``resume_failed``, never a silent gap) and the store keeps at
most ``max_streams`` completions (the oldest one nobody is reading is evicted first).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from .error_bodies import error_body

MAX_STREAMS = 64  # completions kept for resume, per app
MAX_STREAM_BYTES = 1024 * 1024  # frames kept per completion


class ReplayGap(Exception):
    """The frames a reader needs were dropped from the buffer."""


def sse_frame(event_id: str, data: str) -> bytes:
    return f"id: {event_id}\ndata: {data}\n\n".encode()


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class CompletionStream:
    def __init__(self, cid: str, owner: str, grace_s: float, max_bytes: int = MAX_STREAM_BYTES):
        self.id = cid
        self.owner = owner  # digest of the API key that created it
        self.grace_s = grace_s
        self.max_bytes = max_bytes
        self.frames: deque[bytes] = deque()
        self.base = 0  # n of frames[0]
        self.count = 0  # n of the next frame
        self.nbytes = 0
        self.finished = False  # [DONE] (or the end) has been pushed
        self.readers = 0
        self.cancel: Callable[[], None] = lambda: None  # stops the job; set by the owner
        self.task: asyncio.Task[None] | None = None  # the pump feeding this stream
        self.timer: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ writer side

    def push(self, data: str) -> None:
        if self.finished:
            raise RuntimeError(f"stream {self.id}: push after finish")
        frame = sse_frame(f"{self.id}:{self.count}", data)
        self.frames.append(frame)
        self.count += 1
        self.nbytes += len(frame)
        while self.nbytes > self.max_bytes and len(self.frames) > 1:
            self.nbytes -= len(self.frames.popleft())
            self.base += 1
        self._notify()

    def finish(self) -> None:
        self.finished = True
        self._notify()

    def _notify(self) -> None:
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    # ------------------------------------------------------------------ reader side

    def covers(self, after: int) -> bool:
        """Whether every frame after ``after`` is still here (or yet to come)."""
        return after + 1 >= self.base

    async def frames_after(self, after: int) -> AsyncIterator[bytes]:
        """Every frame with n > ``after``, live ones as they come, until the end."""
        n = after + 1
        while True:
            if n < self.base:
                raise ReplayGap
            if n < self.count:
                yield self.frames[n - self.base]
                n += 1
                continue
            if self.finished:
                return
            await self._wake.wait()


class CompletionStore:
    """The streamed completions a client may still resume, by id."""

    def __init__(self, max_streams: int = MAX_STREAMS):
        self.max_streams = max_streams
        self._items: OrderedDict[str, CompletionStream] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, stream: CompletionStream) -> bool:
        """Keep ``stream``; False when full of completions that are being read."""
        if len(self._items) >= self.max_streams and not self._evict_one():
            return False
        self._items[stream.id] = stream
        return True

    def get(self, cid: str, owner: str) -> CompletionStream | None:
        s = self._items.get(cid)
        return s if s is not None and s.owner == owner else None

    def attach(self, s: CompletionStream) -> None:
        s.readers += 1
        if s.timer is not None:
            s.timer.cancel()
            s.timer = None

    def detach(self, s: CompletionStream, delivered: bool) -> None:
        """A reader left; ``delivered``: it sent the very last frame."""
        s.readers -= 1
        if s.readers > 0 or s.id not in self._items:
            return
        if delivered and s.finished:
            self.drop(s)
        elif s.timer is None:
            s.timer = asyncio.get_running_loop().call_later(s.grace_s, self.expire, s)

    def expire(self, s: CompletionStream) -> None:
        s.timer = None
        if s.readers == 0:
            self.drop(s)

    def drop(self, s: CompletionStream) -> None:
        if self._items.get(s.id) is s:
            del self._items[s.id]
        if s.timer is not None:
            s.timer.cancel()
            s.timer = None
        if not s.finished:
            s.cancel()

    def _evict_one(self) -> bool:
        idle = [s for s in self._items.values() if s.readers == 0]
        if not idle:
            return False
        self.drop(next((s for s in idle if s.finished), idle[0]))  # finished ones first, oldest first
        return True

    def close(self) -> None:
        for s in list(self._items.values()):
            self.drop(s)

    async def drain(self, timeout_s: float, flush_s: float = 2.0) -> None:
        """Shutdown: let running completions finish (bounded by ``timeout_s``), then cancel the rest
        and give their pumps ``flush_s`` to push the final frames (an error and ``[DONE]``), so that
        no reader is left without the end of its stream."""
        pumps = [s.task for s in self._items.values() if s.task is not None and not s.task.done()]
        if pumps and timeout_s > 0:
            await asyncio.wait(pumps, timeout=timeout_s)
        self.close()
        pumps = [t for t in pumps if not t.done()]
        if pumps:
            await asyncio.wait(pumps, timeout=flush_s)


class SseResponse(StreamingResponse):
    """One reader of a ``CompletionStream`` as ``text/event-stream``; detaches however it ends."""

    def __init__(self, store: CompletionStore, stream: CompletionStream, after: int):
        self.store = store
        self.stream = stream
        self.after = after
        self.delivered = False
        super().__init__(
            self._body(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _body(self) -> AsyncIterator[bytes]:
        last = self.after
        try:
            async for frame in self.stream.frames_after(self.after):
                yield frame
                last += 1
        except ReplayGap:
            err = error_body(410, "resume_failed", "this stream fell too far behind and lost events; retry")
            yield sse_frame(f"{self.stream.id}:{last}", dumps(err))
            return
        self.delivered = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.store.attach(self.stream)
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.store.detach(self.stream, self.delivered)
