"""Resume races, pinned as deterministic interleavings on the Connection core (stand-in socket and
session, no network): a superseded socket must not eat the new socket's wake-up, a socket that dies
in its hello must still detach, and a resuming client learns which of its frames arrived."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.websockets import WebSocketDisconnect, WebSocketState

from gateway.core.config import LimitsConfig
from gateway.core.session_registry import SessionRegistry
from gateway.realtime.connection import Connection
from gateway.realtime.replay import ReplayBuffer


class Gate:
    """A stand-in WebSocket whose sends block while ``open`` is clear."""

    def __init__(self, fail: bool = False) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.fail = fail  # the peer vanished: every send raises as starlette does
        self.sent: list[dict[str, Any]] = []
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.client_state = WebSocketState.CONNECTED

    async def send_text(self, text: str) -> None:
        await self.open.wait()
        if self.fail:
            raise WebSocketDisconnect(1006)
        self.sent.append(json.loads(text))

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.client_state = WebSocketState.DISCONNECTED


class Svc:
    key_rate = None  # no cluster-wide frame count

    def __init__(self, registry: SessionRegistry) -> None:
        self.registry = registry


class View:
    def session_view(self) -> dict[str, Any]:
        return {}


class Live:
    """What Connection touches of a LiveSession."""

    def __init__(self, registry: SessionRegistry) -> None:
        self.limits = LimitsConfig()
        self.outbox = ReplayBuffer()
        self.changed = asyncio.Event()
        self.session = View()
        self.svc = Svc(registry)
        self.attached: Connection | None = None
        self.on_event: Any = None
        self.closed = False
        self.received = 0
        self.token, self.key = "tok", "key"
        self.parked = 0

    @property
    def busy(self) -> bool:
        return False

    @property
    def deliverable(self) -> int:  # no shared store: every stamped event may go out
        return self.outbox.next_seq - 1

    def emit(self, n: int = 1) -> None:
        for _ in range(n):
            self.outbox.stamp({"type": "response.output_text.delta"})
        self.changed.set()  # as LiveSession.send does

    def close(self, reason: str = "session_closed") -> None:
        self.closed = True
        self.changed.set()

    def park(self) -> None:  # LiveSession.park hands its KV slot back; here it is only counted
        self.parked += 1


async def until(cond: Any, limit_s: float = 2.0) -> None:
    """Poll a condition on the stand-ins with a deadline (a stall fails here)."""
    async with asyncio.timeout(limit_s):
        while not cond():  # noqa: ASYNC110 (state of plain objects, no event to wait on)
            await asyncio.sleep(0.001)


async def test_a_superseded_socket_never_eats_the_new_sockets_wakeup():
    """X resumes and stalls in its hello; B resumes over it and replays; an event is stamped while B
    is mid-send; then X's hello completes. Before the fix X started its writer anyway, whose clear()
    at the top of its loop ate B's wake-up — B then waited forever with the event unsent."""
    reg = SessionRegistry(grace_period_s=30.0, max_sessions=4)
    live = Live(reg)
    reg.add(live)
    live.emit(3)  # seqs 0..2 exist; both clients have seen seq 0
    wx, wb = Gate(), Gate()
    wx.open.clear()
    x = asyncio.create_task(Connection(wx, live, last_seq=0).run(resumed=True))  # type: ignore[arg-type]
    await asyncio.sleep(0)  # X attached, blocked in its hello
    assert live.attached is not None
    b_conn = Connection(wb, live, last_seq=0)  # type: ignore[arg-type]
    b = asyncio.create_task(b_conn.run(resumed=True))
    await until(lambda: b_conn.cursor == 2)  # B said hello and replayed 1..2; its writer now waits
    wb.open.clear()
    live.emit()  # seq 3: wakes B's writer, which blocks sending it
    await until(lambda: b_conn._sending_since is not None)
    live.emit()  # seq 4, stamped while B is mid-send: its only wake-up is `changed`
    wx.open.set()  # X's hello completes now
    for _ in range(5):
        await asyncio.sleep(0)
    wb.open.set()
    await until(lambda: b_conn.cursor == 4)  # a stall times out here
    assert [e.get("seq") for e in wb.sent] == [None, 1, 2, 3, 4]  # session.resumed, then no gap, no dup
    assert live.attached is b_conn
    b_conn.kick(1000, "test over")
    await asyncio.wait_for(asyncio.gather(x, b), 2)


async def test_a_socket_that_dies_in_its_hello_still_detaches_so_the_session_can_expire():
    """Before the fix the hello was sent outside the try/finally: a peer gone by then left the session
    attached to a dead socket forever — never expiring, never freed."""
    reg = SessionRegistry(grace_period_s=0.05, max_sessions=4)
    live = Live(reg)
    reg.add(live)
    dead = Gate(fail=True)
    try:
        await asyncio.wait_for(Connection(dead, live).run(resumed=True), 2)  # type: ignore[arg-type]
    except WebSocketDisconnect:
        pass
    assert live.attached is None and live.parked == 1
    await until(lambda: live.closed)  # the grace timer ran
    assert len(reg) == 0


async def test_session_resumed_acknowledges_the_client_frames_it_read():
    """A frame sent just before an abortive close can vanish in the kernel (seen: the item arrived,
    the response.create behind it did not, and the resumed client waited forever for a reply). The
    session counts what it read across sockets; session.resumed says so, and the client resends."""
    reg = SessionRegistry(grace_period_s=30.0, max_sessions=4)
    live = Live(reg)
    reg.add(live)
    ws1 = Gate()
    c1 = Connection(ws1, live)  # type: ignore[arg-type]
    live.on_text = lambda raw: None  # type: ignore[attr-defined]
    t1 = asyncio.create_task(c1.run())
    await ws1.inbox.put({"type": "websocket.receive", "text": '{"type":"conversation.item.create"}'})
    await until(lambda: live.received == 1)
    await ws1.inbox.put({"type": "websocket.disconnect", "code": 1006})  # the response.create was lost
    await asyncio.wait_for(t1, 2)
    ws2 = Gate()
    c2 = Connection(ws2, live, last_seq=-1)  # type: ignore[arg-type]
    t2 = asyncio.create_task(c2.run(resumed=True))
    await until(lambda: bool(ws2.sent))
    assert ws2.sent[0]["type"] == "session.resumed" and ws2.sent[0]["received_events"] == 1
    c2.kick(1000, "test over")
    await asyncio.wait_for(t2, 2)
