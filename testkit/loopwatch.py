"""A loop-lag monitor for tests: every callback a watched event loop runs is timed, and the slow ones named.

asyncio's debug mode (``slow_callback_duration``) does the same timing, but also turns on checks
and warnings a whole test suite would trip over; this times only ``Handle._run`` of the loops it
watches. A callback counts as a stall when it computed for more than ``cpu_s`` of its own thread's
CPU time (what a client's input made the loop do: a 2-core CI machine under load stretches wall
time, not CPU time), or blocked the loop for more than ``wall_s`` of wall time whatever it did
(a blocking call that computes nothing). Each stall names the callback, as asyncio's debug log does.

Time the cyclic garbage collector spends inside a callback is not counted: it walks the whole test
process (every earlier test's leftovers, the clients' objects), which says nothing of what the
callback did, and a collection triggered by the test process's size can land in any callback.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_watched: dict[int, list[LoopWatch]] = {}  # id(loop) → its watches (a test's own one inside the server's)
_lock = threading.Lock()
_original_run: Any = None


@dataclass
class Stall:
    cpu_s: float
    wall_s: float
    callback: str  # the Handle's repr: the coroutine and where it was running, or the function


@dataclass(eq=False)  # removed from its loop's list by identity
class LoopWatch:
    cpu_s: float = 0.1
    wall_s: float = 2.0
    stalls: list[Stall] = field(default_factory=list)
    callbacks: int = 0
    log: list[Stall] | None = None  # where each stall is also written (``SERVER_STALLS``: the suite's check)

    def check(self) -> None:
        """Fail (AssertionError) naming every stall seen."""
        if self.stalls:
            raise AssertionError(report(self.stalls))


def report(stalls: list[Stall]) -> str:
    lines = "\n".join(f"  {s.cpu_s * 1000:.0f} ms CPU, {s.wall_s * 1000:.0f} ms wall: {s.callback}" for s in stalls)
    return f"the event loop stalled {len(stalls)} time(s):\n{lines}"


class _GcTime(threading.local):
    """CPU and wall seconds this thread has spent in the cyclic garbage collector."""

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0
        self.started = (0.0, 0.0)


_gc_time = _GcTime()


def _on_gc(phase: str, _info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_time.started = (time.thread_time(), time.perf_counter())
    else:
        c0, w0 = _gc_time.started
        _gc_time.cpu += time.thread_time() - c0
        _gc_time.wall += time.perf_counter() - w0


def _timed_run(handle: asyncio.Handle) -> None:
    watches = _watched.get(id(handle._loop))  # type: ignore[attr-defined]
    if not watches:
        _original_run(handle)
        return
    g0c, g0w = _gc_time.cpu, _gc_time.wall
    c0, w0 = time.thread_time(), time.perf_counter()
    try:
        _original_run(handle)
    finally:
        cpu = time.thread_time() - c0 - (_gc_time.cpu - g0c)
        wall = time.perf_counter() - w0 - (_gc_time.wall - g0w)
        stall: Stall | None = None
        for watch in list(watches):
            watch.callbacks += 1
            if cpu > watch.cpu_s or wall > watch.wall_s:
                stall = stall or Stall(cpu, wall, _describe(handle))
                watch.stalls.append(stall)
                if watch.log is not None:
                    watch.log.append(stall)


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
            gc.callbacks.append(_on_gc)
            asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign]


# Every stall of every test server's loop (``testkit.live_server.run_server`` watches each one while it
# serves, start-up and shut-down aside); tests/conftest.py fails the test during which one appears
SERVER_STALLS: list[Stall] = []


@contextmanager
def watch_loop(
    loop: asyncio.AbstractEventLoop, cpu_s: float = 0.1, wall_s: float = 2.0, log: list[Stall] | None = None
) -> Iterator[LoopWatch]:
    """Time ``loop``'s callbacks while the block runs; ``LoopWatch.check()`` fails on a stall."""
    _install()
    watch = LoopWatch(cpu_s, wall_s, log=log)
    with _lock:
        _watched.setdefault(id(loop), []).append(watch)
    try:
        yield watch
    finally:
        with _lock:
            watches = _watched[id(loop)]
            watches.remove(watch)  # by identity (eq=False); _timed_run iterates a copy
            if not watches:
                del _watched[id(loop)]
