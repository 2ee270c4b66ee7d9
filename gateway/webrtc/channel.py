"""The ``oai-events`` data channel, shaped like the Starlette WebSocket a ``Connection`` drives.

``gateway.realtime.connection.Connection`` reads ASGI-style messages and sends text; this adapter
gives it exactly that over an aiortc ``RTCDataChannel``, so the data channel gets the WebSocket's
seq, replay, rate limits, frame-size and JSON-depth checks and errors from the same code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiortc import RTCDataChannel
from starlette.websockets import WebSocketState

LABEL = "oai-events"
HIGH_WATER = 1024 * 1024  # bytes queued in SCTP before a send waits for the peer to read
MAX_PENDING = 4096  # client messages waiting for the reader; more: the caller floods (policy close)


class DataChannelSocket:
    def __init__(
        self,
        channel: RTCDataChannel,
        on_close: Callable[[int, str], None],
        intercept: Callable[[str | bytes], bool] | None = None,
    ):
        self.channel = channel
        self.intercept = intercept  # handles a message itself (True) instead of queueing it
        self.on_close = on_close  # the call ends its peer connection (not the session)
        self.client_state = WebSocketState.CONNECTED
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._drained = asyncio.Event()
        channel.bufferedAmountLowThreshold = HIGH_WATER // 2
        channel.on("message", self._message)
        channel.on("close", self._closed)
        channel.on("bufferedamountlow", self._drained.set)

    def _message(self, data: str | bytes) -> None:
        if self.intercept is not None and self.intercept(data):
            return
        if self._inbox.qsize() >= MAX_PENDING:
            self._inbox.put_nowait({"type": "websocket.disconnect", "code": 1008})
            self.close_now(1008, "message flood")
            return
        key = "text" if isinstance(data, str) else "bytes"
        self._inbox.put_nowait({"type": "websocket.receive", key: data})

    def _closed(self) -> None:
        self.client_state = WebSocketState.DISCONNECTED
        self._drained.set()  # a send waiting for room gives up (it raises below)
        self._inbox.put_nowait({"type": "websocket.disconnect", "code": 1006})

    async def receive(self) -> dict[str, Any]:
        return await self._inbox.get()

    async def send_text(self, text: str) -> None:
        if self.client_state != WebSocketState.CONNECTED or self.channel.readyState != "open":
            raise ConnectionError("data channel is closed")
        while self.channel.bufferedAmount > HIGH_WATER:  # the caller is not reading: push back
            self._drained.clear()
            await self._drained.wait()
            if self.client_state != WebSocketState.CONNECTED:
                raise ConnectionError("data channel is closed")
        self.channel.send(text)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.close_now(code, reason)

    def close_now(self, code: int, reason: str) -> None:
        if self.client_state == WebSocketState.CONNECTED:
            self.client_state = WebSocketState.DISCONNECTED
            self.on_close(code, reason)
