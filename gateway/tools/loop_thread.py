"""The MCP event loop: one daemon thread whose asyncio loop runs every MCP connection's SDK session.

The ``mcp`` SDK parses each answer it receives (JSON, then pydantic) in the task that reads the
transport; a ``tools/list`` page of 1 MB is about 200 ms of that. On the gateway's event loop that
stalled every session; here it stalls only other MCP traffic. The parse is one pydantic-core call that
holds the GIL, so the gateway's loop can still wait for the GIL that long: ``tools.mcp_max_list_bytes``
bounds a page, hence that wait (256 KB: about 50 ms). The gateway's loops hand coroutines over with
``run`` and await them; cancelling the awaiting task cancels the coroutine here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def loop() -> asyncio.AbstractEventLoop:
    """The MCP loop, started on first use (daemon thread: it never holds the process open)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            new = asyncio.new_event_loop()
            thread = threading.Thread(target=new.run_forever, name="mcp-loop", daemon=True)
            thread.start()
            _loop = new
        return _loop


async def run(coro: Coroutine[Any, Any, T]) -> T:
    """``coro``'s result, run on the MCP loop; awaited here without blocking this loop."""
    mcp = loop()
    if asyncio.get_running_loop() is mcp:  # already there (a coroutine of this module's callers)
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, mcp))


def spawn(coro: Coroutine[Any, Any, None]) -> None:
    """``coro`` started on the MCP loop, not waited for: it runs to its end there (bounded by its own
    timeouts) even when the caller's loop is gone, as a server's is at shutdown."""
    asyncio.run_coroutine_threadsafe(coro, loop())
