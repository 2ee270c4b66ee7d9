"""A loop-lag monitor for tests: every callback a watched event loop runs is timed, and the slow ones named.

asyncio's debug mode (``slow_callback_duration``) does the same timing, but also turns on checks
and warnings a whole test suite would trip over; this times only ``Handle._run`` of the loops it
watches. A callback counts as a stall when it computed for more than ``cpu_s`` of its own thread's
CPU time (what a client's input made the loop do: a 2-core CI machine under load stretches wall
time, not CPU time), or blocked the loop for more than ``wall_s`` of wall time whatever it did
(a blocking call that computes nothing). Each stall names the callback, as asyncio's debug log does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_watched: dict[int, LoopWatch] = {}  # id(loop) → its watch
_lock = threading.Lock()
_original_run: Any = None


@dataclass
class Stall:
    cpu_s: float
    wall_s: float
    callback: str  # the Handle's repr: the coroutine and where it was running, or the function


@dataclass
class LoopWatch:
    cpu_s: float = 0.1
    wall_s: float = 2.0
    stalls: list[Stall] = field(default_factory=list)
    callbacks: int = 0

    def check(self) -> None:
        """Fail (AssertionError) naming every stall seen."""
        if self.stalls:
            lines = "\n".join(
                f"  {s.cpu_s * 1000:.0f} ms CPU, {s.wall_s * 1000:.0f} ms wall: {s.callback}" for s in self.stalls
            )
            raise AssertionError(f"the event loop stalled {len(self.stalls)} time(s):\n{lines}")


def _timed_run(handle: asyncio.Handle) -> None:
    watch = _watched.get(id(handle._loop))  # type: ignore[attr-defined]
    if watch is None:
        _original_run(handle)
        return
    c0, w0 = time.thread_time(), time.perf_counter()
    try:
        _original_run(handle)
    finally:
        cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
        watch.callbacks += 1
        if cpu > watch.cpu_s or wall > watch.wall_s:
            watch.stalls.append(Stall(cpu, wall, _describe(handle)))


def _describe(handle: asyncio.Handle) -> str:
    """The callback, and for a task's step the task (its coroutine, and where it next waits)."""
    try:
        what = repr(handle)
        task = getattr(getattr(handle, "_callback", None), "__self__", None)
        if isinstance(task, asyncio.Task):
            what += f" of {task!r}"
        return what[:800]
    except Exception:  # a repr must never be what fails the loop
        return type(handle).__name__


def _install() -> None:
    global _original_run
    with _lock:
        if _original_run is None:
            _original_run = asyncio.events.Handle._run
            asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign]


@contextmanager
def watch_loop(loop: asyncio.AbstractEventLoop, cpu_s: float = 0.1, wall_s: float = 2.0) -> Iterator[LoopWatch]:
    """Time ``loop``'s callbacks while the block runs; ``LoopWatch.check()`` fails on a stall."""
    _install()
    watch = LoopWatch(cpu_s, wall_s)
    _watched[id(loop)] = watch
    try:
        yield watch
    finally:
        _watched.pop(id(loop), None)
