"""Thread → asyncio: engine step events from the engine's worker thread into a session's queue on the loop."""

from __future__ import annotations

import asyncio
from typing import Generic, Protocol, TypeVar

from models.decode import JobEvents

Tag = TypeVar("Tag")
Item = TypeVar("Item", contravariant=True)


class Inbox(Protocol[Item]):
    """Where the events land: an ``asyncio.Queue`` whose items may be wider than ``(tag, events)``."""

    def put_nowait(self, item: Item, /) -> None: ...


class AsyncSink(Generic[Tag]):
    """Called on the engine's thread with each step's events; they land in ``queue`` as
    ``(tag, events)`` on the loop's thread (``call_soon_threadsafe``), in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: Inbox[tuple[Tag, JobEvents]], tag: Tag):
        self.loop = loop
        self.queue = queue
        self.tag = tag

    def __call__(self, events: JobEvents) -> None:
        if self.loop.is_closed():  # the app stopped while a step was in flight
            return
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (self.tag, events))
