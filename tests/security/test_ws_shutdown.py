"""A server stop that finds a WebSocket whose peer has just closed it stops cleanly.

The window is one event-loop turn on a real server (the close answered, the socket not yet gone),
so the guarded protocol is driven here through a transport that keeps the socket in that state."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState
from websockets.client import ClientProtocol
from websockets.frames import Close, CloseCode, Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from gateway.core.config import ServerConfig
from gateway.core.socket_guard import guarded_protocols


class HeldTransport(asyncio.Transport):
    """Records writes; ``close`` marks it closing but never completes (as with an unflushed buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class WaitsForDisconnect:
    """An ASGI app that accepts, then reads until the disconnect."""

    def __init__(self) -> None:
        self.accepted = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        self.accepted.set()
        while (await receive())["type"] != "websocket.disconnect":
            pass


async def test_stop_after_the_peer_closed_does_not_send_a_second_close() -> None:
    _, ws_protocol = guarded_protocols(ServerConfig())
    app = WaitsForDisconnect()
    config = uvicorn.Config(app, ws=ws_protocol, lifespan="off", log_level="warning")
    config.load()
    state = ServerState()
    proto = ws_protocol(config=config, server_state=state, app_state={})
    transport = HeldTransport()
    proto.connection_made(transport)

    client = ClientProtocol(parse_uri("ws://127.0.0.1:8000/v1/realtime"))
    client.send_request(client.connect())
    proto.data_received(b"".join(client.data_to_send()))
    await asyncio.wait_for(app.accepted.wait(), 5)
    client.receive_data(bytes(transport.written))
    assert client.state is State.OPEN
    transport.written.clear()

    client.send_close(CloseCode.NORMAL_CLOSURE)
    proto.data_received(b"".join(client.data_to_send()))
    assert proto.conn.state is State.CLOSING and transport.closing  # answered; the socket not gone yet

    proto.shutdown()  # what uvicorn's server stop calls for each open connection

    client.receive_data(bytes(transport.written))
    frames = [e for e in client.events_received() if isinstance(e, Frame)]
    assert [f.opcode for f in frames] == [Opcode.CLOSE]  # one close: the answer, no 1012 after it
    assert Close.parse(frames[0].data).code == CloseCode.NORMAL_CLOSURE
    async with asyncio.timeout(5):
        await asyncio.gather(*state.tasks)  # the app was told of the disconnect and ended
