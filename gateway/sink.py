"""Thread → asyncio: engine step events from the engine's worker thread into a session's queue on the loop."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from models.decode import JobEvents

Tag = TypeVar("Tag")


class AsyncSink(Generic[Tag]):
    """Called on the engine's thread with each step's events; they land in ``queue`` as
    ``(tag, events)`` on the loop's thread (``call_soon_threadsafe``), in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[tuple[Tag, JobEvents]], tag: Tag):
        self.loop = loop
        self.queue = queue
        self.tag = tag

    def __call__(self, events: JobEvents) -> None:
        if self.loop.is_closed():  # the app stopped while a step was in flight
            return
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (self.tag, events))
