"""The per-socket loop for /v1/realtime: one reader task and one writer task around a ``LiveSession``.

Thin I/O. The reader never waits on the model, so pings and ``response.cancel`` are read
while a response decodes. The writer sends the session's outbox from the client's cursor, so a
fresh socket and a resumed one are the same code. A client that falls more than
``limits.outbound_queue`` events behind is closed with 1013 and may resume. Tasks are cancelled
in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ..core.ws_frames import UNDECODED_TEXT
from . import protocol as p
from . import server_events as se
from .framegate import Admit, Close, FrameGate, Refuse
from .inputs import Report
from .live_session import LiveSession
from .protocol import (
    CLOSE_NORMAL,
    CLOSE_NOT_UTF8,
    CLOSE_POLICY,
    CLOSE_RESTART,
    CLOSE_SUPERSEDED,
    CLOSE_TOO_BIG,
    CLOSE_TRY_AGAIN,
)

log = logging.getLogger("stream_omni.connection")

# The most a socket's reader computes before it lets the loop run others: frames that queued up
# (a client sending audio faster than real time, one TCP read of 30 frames) are otherwise all read
# in one task step, since a receive with frames waiting never suspends, and 30 frames of VAD hold
# the loop for 50-100 ms
READ_SLICE_S = 0.005


class Connection:
    def __init__(self, ws: WebSocket, live: LiveSession, last_seq: int = -1, sideband: bool = False):
        """``sideband``: a second socket on a session another transport serves (a WebRTC call's
        server-side control socket): it reads and writes the same events but never takes the
        session over, and its end does not detach it."""
        self.ws = ws
        self.sideband = sideband
        self.live = live
        self.limits = live.limits
        self.cursor = last_seq  # the last seq this client has
        self._closing: tuple[int, str] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        key_rate, key = live.svc.key_rate, live.key
        self.gate = FrameGate(self.limits, (lambda: key_rate.over_rate(key)) if key_rate is not None else None)
        self._sending_since: float | None = None  # when the send in progress started

    @property
    def writer(self) -> asyncio.Task[Any] | None:
        """The task sending this session's events (done once a closed session's are all sent)."""
        return next((t for t in self._tasks if t.get_name() == "ws-writer" and not t.done()), None)

    # ------------------------------------------------------------------ control

    def kick(self, code: int, reason: str) -> None:
        """End this socket (not the session) with ``code``."""
        if self._closing is None:
            self._closing = (code, reason)
        for t in self._tasks:
            t.cancel()

    def _check_lag(self) -> None:
        """Slow consumer: far behind *and* a send stuck for a while (a replaying client that reads is fine)."""
        if self.live.outbox.next_seq - 1 - self.cursor <= self.limits.outbound_queue:
            return
        since = self._sending_since
        if since is not None and time.monotonic() - since > self.limits.send_stall_s:
            self.kick(CLOSE_TRY_AGAIN, "client is not reading; resume to continue")

    # ------------------------------------------------------------------ tasks

    async def _writer(self) -> None:
        live = self.live
        while True:
            events = live.outbox.since(self.cursor)
            if events is None:  # fell behind the replay buffer: cannot continue without a gap
                self.kick(CLOSE_TRY_AGAIN, "client fell too far behind")
                return
            for seq, text in events:
                if seq > live.deliverable:  # not in the shared store yet (gateway.cluster.mirror)
                    break
                await self._send(text)
                self.cursor = seq
            if live.closed and self.cursor >= live.outbox.next_seq - 1:
                self._closing = self._closing or (
                    CLOSE_RESTART if live.svc.registry.draining else CLOSE_NORMAL,
                    "session ended",
                )
                return
            # Wait only when nothing is pending, clearing in the same step as that check: ``changed``
            # is the session's, and a clear() at the top of the loop (or by a superseded socket's
            # writer) could eat the wake-up of an event stamped during the sends above.
            if live.deliverable <= self.cursor:
                live.changed.clear()
                await live.changed.wait()

    async def _send(self, text: str) -> None:
        """One send; while it is stuck (the client stopped reading) the lag check also runs on a
        timer, so a client that stops reading after the last event is closed too, not only one
        that keeps receiving new events."""
        self._sending_since = time.monotonic()
        send = asyncio.ensure_future(self.ws.send_text(text))
        try:
            while not (await asyncio.wait({send}, timeout=self.limits.send_stall_s))[0]:
                self._check_lag()
            send.result()
        finally:
            send.cancel()  # a kick cancels the writer: the send goes with it
            self._sending_since = None

    async def _reader(self) -> None:
        slice_from = time.perf_counter()
        while self._closing is None:
            if time.perf_counter() - slice_from > READ_SLICE_S:
                await asyncio.sleep(0)
                slice_from = time.perf_counter()
            msg = await self.ws.receive()
            if msg["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(msg.get("code", 1000))
            text = msg.get("text", msg.get(UNDECODED_TEXT))  # str, or a big frame's UTF-8 (gateway.core.ws_frames)
            size = len(text) if text is not None else len(msg.get("bytes") or b"")
            match self.gate.admit(time.monotonic(), size, binary=text is None):
                case Close(code, reason):
                    self.kick(code, reason)
                    return
                case Refuse(tell):
                    self.live.frame_refused(tell)
                    continue
                case Admit(wait_s) if wait_s > 0:  # over its bytes/s: this socket reads again later, the others go on
                    await asyncio.sleep(wait_s)
            try:
                if text is not None:
                    if len(text) >= self.limits.parse_off_loop_bytes:  # JSON + depth scan of MBs: not on the loop
                        parser = self.live.svc.frame_parser  # in a process: a thread would still hold the GIL
                        ev = await (parser.parse(text) if parser else asyncio.to_thread(self.live.parse, text))
                        if isinstance(ev, p.ProtocolError) and ev.code == p.NOT_UTF8:  # as the WebSocket layer would
                            self.kick(CLOSE_NOT_UTF8, "text frame is not valid UTF-8")
                            return
                        self.live.on_parsed(ev)
                    else:
                        self.live.on_text(text)
                elif msg.get("bytes") is not None:
                    self.live.on_bytes(msg["bytes"])
            except Exception as exc:  # a bug must cost one event, not the session
                log.error("handling a client event failed: %s", type(exc).__name__, exc_info=True)
                self.live.svc.metrics.errors.labels(code="server_error").inc()
                failed = Report("server_error", "the server failed to handle this event")
                self.live.send(self.live.session.handle(failed))
            # counted once handled, with no await in between: a frame whose handling was cut short
            # (this socket superseded while it waited or parsed) is not counted, so the client resends it
            self.live.received += 1

    # ------------------------------------------------------------------ lifecycle

    async def run(self, resumed: bool = False) -> None:
        live = self.live
        previous = live.attached
        if not self.sideband:
            if previous is not None and previous is not self:
                previous.kick(CLOSE_SUPERSEDED, "session resumed on another connection")
            live.attached = self
            live.on_event = self._check_lag
        try:  # from the attach on: however this ends (even in the hello), detach — or the session never expires
            if resumed:
                hello = se.session_resumed(
                    session=live.session.session_view(),
                    replay_from_seq=self.cursor + 1,
                    # client frames the session has read: a frame sent just before an abortive close
                    # (TCP reset) can vanish in the kernel, so the client resends those past this count
                    received_events=live.received,
                )
                await self.ws.send_text(json.dumps(hello, separators=(",", ":")))
            if self._closing is not None:  # superseded while saying hello: no tasks of ours may run
                return
            self._tasks = [
                asyncio.create_task(self._writer(), name="ws-writer"),
                asyncio.create_task(self._reader(), name="ws-reader"),
            ]
            await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in self._tasks:
                if t.done() and not t.cancelled():
                    exc = t.exception()
                    if exc is not None and not isinstance(exc, WebSocketDisconnect | OSError):
                        log.error("connection task %s failed: %s", t.get_name(), type(exc).__name__)
        finally:
            for t in self._tasks:
                t.cancel()
            for t in self._tasks:
                with contextlib.suppress(BaseException):
                    await t
            if live.attached is self:
                live.attached = None
                live.on_event = None
                live.svc.registry.detached(live)
                live.park()
            if self._closing and self.ws.client_state == WebSocketState.CONNECTED:
                if self._closing[0] in (CLOSE_POLICY, CLOSE_TOO_BIG):  # say why before closing
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self._flush(), 1.0)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.ws.close(*self._closing), 2.0)

    async def _flush(self) -> None:
        for seq, text in self.live.outbox.since(self.cursor) or []:
            await self.ws.send_text(text)
            self.cursor = seq
