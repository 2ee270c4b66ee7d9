"""A resumed socket on a replica that does not own its session: events from Redis, frames to the owner.

The owner (``lease:{token}``) keeps running the session. This socket replays the session's stream
from the client's ``last_seq + 1`` and then tails it live; what the client sends goes to the
owner's command stream. Between reads it checks three things: a newer socket (here or elsewhere)
took the session — closed 4009, as on one replica; the session ended — closed 1000 once its last
events are sent; the owner's lease expired (it died) — this replica takes the session over and
the same socket goes on as a local ``Connection``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ..core.services import Services
from ..core.ws_frames import UNDECODED_TEXT
from ..realtime import server_events as se
from ..realtime.connection import Connection
from ..realtime.framegate import Admit, Close, FrameGate, Refuse
from ..realtime.live_session import LiveSession
from ..realtime.protocol import CLOSE_NORMAL, CLOSE_NOT_UTF8, CLOSE_SUPERSEDED, CLOSE_TRY_AGAIN
from .node import ClusterNode
from .store import Entries, StoreUnavailable
from .takeover import safe_take_over

log = logging.getLogger("stream_omni.cluster")


class Proxy:
    def __init__(self, s: Services, node: ClusterNode, ws: WebSocket, token: str, key: str, owner: str):
        self.s, self.node, self.ws, self.token, self.key = s, node, ws, token, key
        self.store = node.store
        self.owner = owner  # the replica holding the lease
        self.socket_id = secrets.token_hex(8)
        self.cursor = -1  # the last seq this client has
        self.closing: tuple[int, str] | None = None
        self.taken: LiveSession | None = None  # set when this replica took the session over
        self._forwarding = asyncio.Lock()  # a frame being handed to the owner is never cut in half
        self.gate = FrameGate(s.config.limits, lambda: node.over_rate(key))

    async def run(self, last_seq: int, replay: Entries, received: int, view: dict[str, object]) -> None:
        """Say ``session.resumed``, send ``replay``, then serve until the socket or the session ends."""
        self.cursor = last_seq
        await self.store.attach(self.token, self.socket_id)
        await self.store.command(self.owner, self.token, "attach", self.socket_id)
        # the frames the session has handled, counted by the owner once it took this socket on (the
        # snapshot's count can be older): the client resends the rest
        acked = await self.store.wait_ack(self.socket_id, self.node.period_s * 3)
        received = received if acked is None else acked
        hello = se.session_resumed(view, replay_from_seq=last_seq + 1, received_events=received)
        tasks: list[asyncio.Task[None]] = []
        try:
            await self.ws.send_text(json.dumps(hello, separators=(",", ":")))
            await self._send(replay)
            tasks = [
                asyncio.create_task(self._follow(), name="proxy-follow"),
                asyncio.create_task(self._forward(), name="proxy-forward"),
            ]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if self.taken is not None:  # the owner died: this replica runs the session now
                async with self._forwarding:
                    tasks[1].cancel()
                with contextlib.suppress(BaseException):
                    await tasks[1]
                await Connection(self.ws, self.taken, self.cursor).run()
                return
        except (WebSocketDisconnect, OSError, StoreUnavailable):
            pass
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t
            if self.taken is None:
                with contextlib.suppress(StoreUnavailable):
                    await self.store.command(self.owner, self.token, "detach", self.socket_id)
                await self._close()

    async def _close(self) -> None:
        if self.ws.client_state != WebSocketState.CONNECTED:
            return
        code, reason = self.closing or (CLOSE_TRY_AGAIN, "session store unavailable; resume to continue")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code, reason), 2.0)

    async def _send(self, entries: Entries) -> None:
        for seq, text in entries:
            if seq <= self.cursor:
                continue
            await self.ws.send_text(text)
            self.cursor = seq

    async def _follow(self) -> None:
        """The session's events as the owner writes them, and the checks between reads."""
        period = self.node.period_s / 2
        checked = time.monotonic()
        while True:
            got = await self.store.tail(self.token, self.cursor, int(period * 1000))
            await self._send(got)
            if got and time.monotonic() - checked < period:
                continue
            checked = time.monotonic()
            if await self.store.record(self.token) is None:  # ended: send what is left, then close
                await self._send(await self.store.tail(self.token, self.cursor, 1))
                self.closing = (CLOSE_NORMAL, "session ended")
                return
            attached = await self.store.still_attached(self.token, self.socket_id)
            if attached == "superseded":
                self.closing = (CLOSE_SUPERSEDED, "session resumed on another connection")
                return
            holder = await self.store.holder(self.token)
            if attached == "reclaimed" and holder is not None and holder == self.owner:
                await self.store.command(holder, self.token, "attach", self.socket_id)
            if holder is None:  # the owner's lease expired: it died
                self.taken = await safe_take_over(self.s, self.node, self.token, self.key)
                if self.taken is not None:
                    self.taken.attached = None  # the Connection attaches itself
                    return
                holder = await self.store.holder(self.token)  # another replica won it
            if holder is not None and holder != self.owner:
                self.owner = holder
                await self.store.command(holder, self.token, "attach", self.socket_id)

    async def _forward(self) -> None:
        """Client frames → the owner, in order, admitted as on a local socket (``FrameGate``)."""
        while True:
            msg = await self.ws.receive()
            if msg["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(msg.get("code", 1000))
            text = msg.get("text", msg.get(UNDECODED_TEXT))  # a big text frame comes as UTF-8 (gateway.core.ws_frames)
            size = len(text) if text is not None else len(msg.get("bytes") or b"")
            match self.gate.admit(time.monotonic(), size, binary=text is None):
                case Close(code, reason):
                    self.closing = (code, reason)
                    return
                case Refuse(tell):
                    if not tell:  # the owner counts and says only the told ones, without amplifying a flood
                        continue
                    kind, data = "limited", b""
                case Admit(wait_s):
                    if isinstance(text, bytes) and not _utf8(text):  # what the WebSocket layer checks on small ones
                        self.closing = (CLOSE_NOT_UTF8, "text frame is not valid UTF-8")
                        return
                    kind, data = (
                        ("text", text if isinstance(text, bytes) else text.encode())
                        if text is not None
                        else ("bytes", msg.get("bytes") or b"")
                    )
                    if wait_s > 0:  # over its bytes/s: this socket reads again later, the others go on
                        await asyncio.sleep(wait_s)
            async with self._forwarding:
                await self.store.command(self.owner, self.token, kind, data)


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
