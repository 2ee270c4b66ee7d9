"""A resuming realtime client for the resume and chaos tests: it tracks seq, drops sockets on purpose,
reconnects with resume_token + last_seq, and checks the stream it assembles."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import websockets


@dataclass
class Stream:
    token: str | None = None
    last_seq: int = -1
    events: list[dict[str, Any]] = field(default_factory=list)
    resume_failed: int = 0
    drops: int = 0  # sockets the client dropped on purpose
    server_closes: int = 0  # sockets the server closed on us
    fresh_sessions: int = 0
    frames: list[str] = field(default_factory=list)  # what this client sent to its session, in order
    resent: int = 0  # frames resent after a session.resumed said they never arrived

    def accept(self, ev: dict[str, Any]) -> bool:
        """Keep an event (False if its seq was already seen: a duplicate)."""
        if ev["type"] == "error" and ev["error"]["code"] == "resume_failed":
            self.resume_failed += 1
            return False
        if "seq" not in ev:
            return False  # session.resumed carries no seq
        if ev["seq"] <= self.last_seq:
            return False
        assert ev["seq"] == self.last_seq + 1, f"gap: {self.last_seq} → {ev['seq']}"
        self.last_seq = ev["seq"]
        self.events.append(ev)
        if ev["type"] == "session.created":
            self.token = ev["resume"]["token"]
        return True

    def text(self) -> str:
        return "".join(e["delta"] for e in self.events if e["type"] == "response.output_text.delta")

    def count(self, type_: str) -> int:
        return sum(1 for e in self.events if e["type"] == type_)


# max_queue=None: a client that stops reading with frames queued would pause its socket and not see
# the server's close frame, so each ws.close() would wait out close_timeout (10 s) — a test artefact
# that once sank the chaos test's time limit
WS_OPTS: dict[str, Any] = {"max_size": None, "max_queue": None, "open_timeout": 10, "close_timeout": 5}


async def connect(addr: str, s: Stream) -> Any:
    if s.token is None:
        return await websockets.connect(f"ws://{addr}/v1/realtime", **WS_OPTS)
    return await websockets.connect(f"ws://{addr}/v1/realtime?resume_token={s.token}&last_seq={s.last_seq}", **WS_OPTS)


async def drop(ws: Any, how: str) -> None:
    if how == "abort":  # TCP reset / vanished peer: no close frame
        ws.transport.abort()
    else:
        await ws.close()
    await asyncio.sleep(0)


USER_MSG = {
    "type": "conversation.item.create",
    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "tell me"}]},
}
CREATE = {"type": "response.create", "response": {"scheduler": {"strategy": "fast"}}}


class Stalled(AssertionError):
    """No event within the receive timeout: the stream stalled."""


async def recv(ws: Any, timeout_s: float) -> dict[str, Any]:
    try:
        return json.loads(await asyncio.wait_for(ws.recv(), timeout_s))
    except TimeoutError:
        raise Stalled(f"no event within {timeout_s} s") from None


async def run_with_drops(
    addr: str, drop_after: list[tuple[int, str]], limit_s: float = 30, recv_timeout_s: float = 10
) -> Stream:
    """One conversation turn; after each listed count of received frames, drop the socket that way.

    Every receive has ``recv_timeout_s``: a stalled stream raises ``Stalled`` instead of hanging."""
    s = Stream()
    plan = list(drop_after)
    sent = False
    received = 0
    async with asyncio.timeout(limit_s):
        while True:
            ws = await connect(addr, s)
            try:
                while True:
                    if plan and received >= plan[0][0]:
                        how = plan.pop(0)[1]
                        received = 0
                        s.drops += 1
                        await drop(ws, how)
                        break
                    ev = await recv(ws, recv_timeout_s)
                    received += 1
                    if ev["type"] == "error" and ev["error"]["code"] == "resume_failed":
                        s.accept(ev)
                        s.token, s.last_seq, s.events, sent = None, -1, [], False  # start over, fresh
                        s.frames = []
                        break
                    s.accept(ev)
                    if ev["type"] == "session.resumed":  # frames lost in the drop's TCP reset: send again
                        for frame in s.frames[ev["received_events"] :]:
                            await ws.send(frame)
                            s.resent += 1
                    if ev["type"] == "session.created" and not sent:
                        s.frames = [json.dumps(USER_MSG), json.dumps(CREATE)]
                        for frame in s.frames:
                            await ws.send(frame)
                        sent = True
                    if ev["type"] == "response.done":
                        await ws.close()
                        return s
            except websockets.ConnectionClosed:
                s.server_closes += 1
            finally:
                if ws.transport is not None and not ws.transport.is_closing():
                    ws.transport.abort()
            if s.token is None:  # never saw session.created: nothing to resume
                sent = False
                s.fresh_sessions += 1
