"""Schema checks and grammar compilation off the event loop: one worker thread, a bounded queue.

A client's tools or ``response_format`` are compiled into a grammar (``models.constrain``); even
within the schema budget (``models.schema_budget``) that can take a fraction of a second, which
on the event loop would stall every socket. One thread does it, so a flood of schemas costs the
process one core at most; past ``MAX_WAITING`` compilations queued or running, a request is
refused ``server_busy`` rather than queued without end.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from .workers import yield_to_decoding

P = ParamSpec("P")
T = TypeVar("T")

MAX_WAITING = 8  # compilations queued or running at once, all clients together

_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar", initializer=yield_to_decoding)
_lock = threading.Lock()  # several event loops (test servers) share the pool
_waiting = 0


class CompileBusy(Exception):
    """The grammar worker has ``MAX_WAITING`` jobs already: retry shortly."""


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on the grammar thread; ``CompileBusy`` when its queue is full."""
    global _waiting
    with _lock:
        if _waiting >= MAX_WAITING:
            raise CompileBusy
        _waiting += 1
    try:
        return await asyncio.wrap_future(_POOL.submit(lambda: fn(*args, **kwargs)))
    finally:
        with _lock:
            _waiting -= 1
