"""A session's input cleaner run off the event loop: frames, played audio and commits stay in their order.

``processors.input_clean`` does the DSP. Here each session queues its microphone frames, the audio it plays
(the echo reference) and anything that must follow the frames (a commit, a clear); one task per session
hands the queued frames to a shared worker thread in one batch and delivers the cleaned frames back on the
loop, in order. While the cleaner has nothing to do (no suppressor, nothing played within the echo's reach)
a frame is handed on at once, untouched and without a thread hop: a session that never speaks costs nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from processors.input_clean import InputCleaner

log = logging.getLogger("stream_omni.clean_input")

_pool: ThreadPoolExecutor | None = None


def pool() -> ThreadPoolExecutor:
    """The worker thread every session's cleaning shares (10 ms of audio costs ≈ 0.1 ms: one is plenty)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="so-clean")
    return _pool


@dataclass(frozen=True)
class _Frame:
    raw: bytes  # pcm16 at the session's rate
    event_id: str | None


@dataclass(frozen=True)
class _Played:
    pcm: bytes  # pcm16 at ``rate``
    rate: int


@dataclass(frozen=True)
class _StopPump:
    pass


@dataclass(frozen=True)
class _Then:
    fn: Callable[[], None]  # runs on the loop once every frame before it is delivered


_Item = _Frame | _Played | _StopPump | _Then


class CleanPump:
    def __init__(self, cleaner: InputCleaner, deliver: Callable[[bytes, str | None], None]):
        self.cleaner = cleaner
        self.deliver = deliver  # a cleaned frame, on the loop, in order
        self._queue: deque[_Item] = deque()
        self._task: asyncio.Task[None] | None = None
        self._then = False  # a ``then`` callback runs: every frame before it is out, none is being cleaned

    @property
    def busy(self) -> bool:
        """Whether frames are queued or being cleaned (the cleaner is the worker's until it is not)."""
        return self._task is not None and not self._then

    def append(self, raw: bytes, event_id: str | None) -> None:
        if not self.busy and self.cleaner.idle(len(raw)):
            self.deliver(self.cleaner.push(raw), event_id)  # unchanged; counted on the playout clock
            return
        self._put(_Frame(raw, event_id))

    def played(self, pcm: bytes, rate: int) -> None:
        """The session sent this audio to its client: the echo reference from the microphone's present on."""
        if self.busy:
            self._put(_Played(pcm, rate))
        else:
            self.cleaner.played(pcm, rate)

    def stop_playback(self) -> None:
        if self.busy:
            self._put(_StopPump())
        else:
            self.cleaner.stop_playback()

    def then(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` after every frame queued so far is delivered (at once if none is)."""
        if self.busy:
            self._put(_Then(fn))
        else:
            fn()

    def _put(self, item: _Item) -> None:
        self._queue.append(item)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="clean-input")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                batch: list[_Item] = []
                while self._queue and not isinstance(self._queue[0], _Then):
                    batch.append(self._queue.popleft())
                if batch:
                    for raw, event_id in await loop.run_in_executor(pool(), self._clean, batch):
                        if raw:  # (less than a frame comes back empty: it is in the next one)
                            self.deliver(raw, event_id)
                while self._queue and isinstance(self._queue[0], _Then):
                    item = self._queue.popleft()
                    assert isinstance(item, _Then)
                    self._then = True  # what it does now (a commit) is in order: not queued again
                    try:
                        item.fn()
                    finally:
                        self._then = False
        finally:
            self._task = None

    def _clean(self, batch: list[_Item]) -> list[tuple[bytes, str | None]]:
        """On the worker thread: the batch through the cleaner, in order."""
        out: list[tuple[bytes, str | None]] = []
        for item in batch:
            if isinstance(item, _Frame):
                try:
                    out.append((self.cleaner.push(item.raw), item.event_id))
                except Exception as exc:  # never lose the user's audio to the cleaner: it goes on as it came
                    log.error("input cleaning failed: %s", type(exc).__name__)
                    out.append((item.raw, item.event_id))
            elif isinstance(item, _Played):
                self.cleaner.played(item.pcm, item.rate)
            elif isinstance(item, _StopPump):
                self.cleaner.stop_playback()
        return out

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._queue.clear()
