"""gateway.core.session_registry's shutdown drain, on stand-in sessions (pure asyncio, no sockets)."""

from __future__ import annotations

import asyncio

from gateway.core.session_registry import SessionRegistry


class Attached:
    def __init__(self, writer: asyncio.Task) -> None:
        self.writer = writer


class Live:
    """What the registry touches of a LiveSession: its token, busy(), close() and the attached socket."""

    def __init__(self, token: str, busy_s: float, writer: asyncio.Task | None) -> None:
        self.token = token
        self.closed = False
        self.closed_because: str | None = None
        self.until = asyncio.get_running_loop().time() + busy_s
        self.attached = None if writer is None else Attached(writer)

    @property
    def busy(self) -> bool:
        return asyncio.get_running_loop().time() < self.until

    def close(self, reason: str) -> None:
        self.closed, self.closed_because = True, reason


async def test_drain_waits_for_running_responses_then_for_each_socket_to_send_what_is_left():
    """A finished response's last events must reach the socket before uvicorn closes it (a CI run
    once lost `response.done` that way); a writer that never finishes costs ``flush_s`` at most."""
    sent: list[str] = []

    async def writer(name: str, delay: float) -> None:
        await asyncio.sleep(delay)  # a socket still sending the session's last events
        sent.append(name)

    reg = SessionRegistry(grace_period_s=30.0, max_sessions=8)
    slow = Live("a", busy_s=0.2, writer=asyncio.create_task(writer("a", 0.3)))
    idle = Live("b", busy_s=0.0, writer=asyncio.create_task(writer("b", 0.05)))
    parked = Live("c", busy_s=0.0, writer=None)  # detached, waiting for a resume
    stuck = Live("d", busy_s=0.0, writer=asyncio.create_task(asyncio.sleep(60)))
    reg.sessions.update({x.token: x for x in (slow, idle, parked, stuck)})
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await reg.drain(timeout_s=5.0, flush_s=1.0)
    took = loop.time() - t0
    assert sorted(sent) == ["a", "b"]  # both sockets finished sending before drain returned
    assert all(x.closed_because == "server_shutdown" for x in (slow, idle, parked, stuck))
    assert reg.draining and not reg.sessions
    assert 1.0 <= took < 3.0  # the stuck writer was waited for flush_s, not forever
    stuck.attached.writer.cancel()


async def test_a_session_detached_twice_keeps_one_timer():
    """Two detaches in a row (a socket here, then one on another replica) must not leave a timer
    behind that ends the session early, once it was resumed and detached again."""
    loop = asyncio.get_running_loop()
    grace = 1.0
    reg = SessionRegistry(grace_period_s=grace, max_sessions=4)
    live = Live("tok", 0, None)
    live.key = "k"
    ended = asyncio.Event()
    closed_at: list[float] = []

    def close(reason: str) -> None:
        closed_at.append(loop.time())
        live.closed, live.closed_because = True, reason
        ended.set()

    live.close = close
    reg.add(live)
    reg.detached(live)
    await asyncio.sleep(0.1)  # a moment between the two detaches (time is what is under test)
    reg.detached(live)
    assert reg.find("tok", "k") is live  # resumed …
    reg.detached(live)  # … and dropped again: the grace period starts now
    last = loop.time()
    await asyncio.wait_for(ended.wait(), 10)
    assert live.closed_because == "session_expired"
    assert closed_at[0] - last >= grace * 0.99  # a leaked first timer would have fired 0.1 s early
