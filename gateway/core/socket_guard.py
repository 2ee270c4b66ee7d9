"""Connection guards below the ASGI app: uvicorn's h11 and WebSocket protocols,
subclassed so that a socket costs nothing unless it sends a real request promptly.

- **Header deadline.** A connection must deliver a complete request head within
  ``server.header_timeout_s`` of connecting (or of its previous response): else 408 and closed.
  uvicorn has no such timer (its keep-alive timer stops at the first byte, so 1 byte/s holds a
  socket forever).
- **Over-size heads get 431.** Past ``server.max_header_bytes`` (h11 would say 400), and, for a
  WebSocket upgrade, past what the websockets parser accepts (one line ≤ 8192 bytes, ≤ 128
  headers): uvicorn hands such an upgrade to that parser, which fails without answering.
- **Connection caps.** Past ``server.max_connections`` open sockets a new one gets 503 and is
  closed; past ``server.max_pending_per_ip`` sockets from one address that have not yet sent a
  request head, likewise — so a client without a key holds a bounded number of sockets.
- **Dead sockets are aborted.** asyncio's ``transport.close()`` waits to flush the send buffer,
  which a client that never reads never lets happen: ``server.close_timeout_s`` after a WebSocket
  ends, a transport still open is aborted (RST), and so is an HTTP one after a refusal.

Every handler here is O(1) work on the event loop.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import MAX_LINE_LENGTH, MAX_NUM_HEADERS
from websockets.protocol import State

from .config import ServerConfig
from .ws_frames import UNDECODED_TEXT, ChunkedReader


def _reply(status: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


def guarded_protocols(
    server: ServerConfig, undecoded_text_bytes: int = 1 << 62
) -> tuple[type[H11Protocol], type[WebSocketsSansIOProtocol]]:
    """(http, ws) protocol classes for ``uvicorn.Config(http=…, ws=…)``, bound to this server's limits;
    text messages of ``undecoded_text_bytes`` or more reach the app undecoded (``gateway.core.ws_frames``)."""
    pending: Counter[str] = Counter()  # client address → sockets that have not sent a request head yet

    def abort_later(loop: asyncio.AbstractEventLoop, transport: asyncio.Transport) -> None:
        """A transport told to close is aborted if it is still open after the close timeout."""

        loop.call_later(server.close_timeout_s, transport.abort)  # a no-op once the socket is gone

    class GuardedWebSockets(WebSocketsSansIOProtocol):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.close_timeout = server.close_timeout_s  # uvicorn's is a fixed 10 s
            self.conn.reader.__class__ = ChunkedReader  # big frames: two copies fewer on the loop

        def send_receive_event_to_app(self) -> None:
            size = sum(map(len, self.frames))
            if self.curr_msg_data_type != "text" or size < undecoded_text_bytes or self.close_sent:
                super().send_receive_event_to_app()
                return
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            self.frames = []
            self.queue.put_nowait({"type": "websocket.receive", UNDECODED_TEXT: bytes(data)})  # type: ignore[arg-type,misc]
            if not self.read_paused:  # as super(): no more reads until the app takes this message
                self.read_paused = True
                self.transport.pause_reading()

        async def run_asgi(self) -> None:
            await super().run_asgi()
            # super() closed the transport or armed a timer to: either waits for the send buffer
            # to drain, which a client that never reads never allows
            self.loop.call_later(self.close_timeout, self._abort_if_open)

        def keepalive_timeout(self) -> None:
            super().keepalive_timeout()  # closes: which waits for a buffer the client does not read
            self.loop.call_later(self.close_timeout, self._abort_if_open)

        def shutdown(self) -> None:
            # After a peer's close frame, websockets has already answered it (state CLOSING) but
            # uvicorn's close_sent stays False until the socket is gone: its shutdown would send a
            # second close, which websockets refuses with InvalidState, failing the server's stop.
            if self.handshake_complete and not self.close_sent and self.conn.state is not State.OPEN:
                self.close_sent = True
            super().shutdown()

        def _abort_if_open(self) -> None:
            if not self.disconnected:
                self.transport.abort()

    class GuardedH11(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _head_bytes = 0  # bytes of the request head being received
        _pending_key: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            if server.send_buffer_bytes is not None and sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, server.send_buffer_bytes)
            ip = self.client[0] if self.client else ""
            if len(self.connections) > server.max_connections:
                self._refuse("503 Service Unavailable", b"too many connections; retry shortly")
                return
            if pending[ip] >= server.max_pending_per_ip:
                self._refuse("503 Service Unavailable", b"too many connections from this address")
                return
            self._pending_key = ip
            pending[ip] += 1
            self._arm()

        def _settled(self) -> None:
            """The first request head arrived (or the socket ended): no longer pending."""
            if self._pending_key is not None:
                pending[self._pending_key] -= 1
                if pending[self._pending_key] <= 0:
                    del pending[self._pending_key]
                self._pending_key = None

        def _arm(self) -> None:
            self._disarm()
            self._head_bytes = 0
            self._deadline = self.loop.call_later(server.header_timeout_s, self._on_deadline)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _on_deadline(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._refuse("408 Request Timeout", b"no complete request in time")

        def _refuse(self, status: str, body: bytes) -> None:
            self._disarm()
            self._settled()
            if not self.transport.is_closing():
                self.transport.write(_reply(status, body))
                self.transport.close()
                abort_later(self.loop, self.transport)

        def data_received(self, data: bytes) -> None:
            if self.transport.is_closing():
                return
            if self.conn.their_state is h11.IDLE:
                end = data.find(b"\r\n\r\n")
                self._head_bytes += len(data) if end < 0 else end + 4
                if self._head_bytes > server.max_header_bytes:
                    self._refuse("431 Request Header Fields Too Large", b"request head too large")
                    return
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # a whole request head was parsed
                self._disarm()
                self._settled()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # keep-alive: the next request head is due in time too

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            # what websockets' own parser refuses (it then never answers): refuse it here, with 431
            lines = [len(name) + 2 + len(value) for name, value in self.headers]
            if len(lines) > MAX_NUM_HEADERS or max(lines, default=0) > MAX_LINE_LENGTH - 2:
                self._refuse("431 Request Header Fields Too Large", b"a header line is too long for a WebSocket")
                return
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._settled()
            super().connection_lost(exc)

    return GuardedH11, GuardedWebSockets
