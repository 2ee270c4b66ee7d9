"""Where a SIP message came from and how the answer goes back: a UDP datagram's address, or a TCP / TLS
connection (messages framed by Content-Length). The server's dialog logic sees only a ``Peer``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from .framing import StreamFramer

log = logging.getLogger("stream_omni.telephony")

Addr = tuple[str, int]
IDLE_S = 600.0  # a connection silent this long is closed (a call's signalling is quiet, but not for 10 min)


@dataclass(eq=False)
class Peer:
    """One hop back to a caller: ``send`` writes a whole message to it."""

    addr: Addr  # its address (the allow-list is checked on it)
    local: Addr  # ours, as it sees us (Via and Contact)
    transport: str  # "UDP", "TCP" or "TLS": the Via's transport and the Contact's ;transport=
    _udp: asyncio.DatagramTransport | None = None
    _writer: asyncio.StreamWriter | None = None

    def send(self, data: bytes) -> None:
        if self._udp is not None:
            self._udp.sendto(data, self.addr)
        elif self._writer is not None and not self._writer.is_closing():
            self._writer.write(data)
        else:
            log.info("SIP to %s: the %s connection is gone, a message dropped", self.addr[0], self.transport)

    @property
    def open(self) -> bool:
        return self._udp is not None or (self._writer is not None and not self._writer.is_closing())

    def contact(self) -> str:
        # sip:…;transport=tls, not sips: (a hop-by-hop TLS URI): phones on libre 1.x cannot route to a sips: Contact
        tail = "" if self.transport == "UDP" else f";transport={self.transport.lower()}"
        return f"<sip:stream-omni@{self.local[0]}:{self.local[1]}{tail}>"


def udp_peer(transport: asyncio.DatagramTransport, addr: Addr) -> Peer:
    local = transport.get_extra_info("sockname")[:2]
    return Peer((addr[0], addr[1]), (local[0], local[1]), "UDP", _udp=transport)


Handler = Callable[[bytes, Peer], None]


class StreamListener:
    """A TCP or TLS listener and its open connections: closing it ends them (a call's is not left open)."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in self.connections.values():
            writer.close()  # each reader sees the end and its task returns (a cancelled one is logged as an error)
        if self.connections:
            await asyncio.wait(list(self.connections), timeout=2.0)


async def serve_stream(host: str, port: int, handle: Handler, tls: ssl.SSLContext | None = None) -> StreamListener:
    """Listen for SIP over TCP (or TLS with ``tls``) on ``host:port``; each framed message goes to ``handle``."""
    name = "TLS" if tls is not None else "TCP"
    listener = StreamListener()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            listener.connections[task] = writer
        remote = writer.get_extra_info("peername")[:2]
        local = writer.get_extra_info("sockname")[:2]
        peer = Peer((remote[0], remote[1]), (local[0], local[1]), name, _writer=writer)
        framer = StreamFramer()
        try:
            while True:
                data = await asyncio.wait_for(reader.read(65536), IDLE_S)
                if not data:
                    break
                for message in framer.feed(data):
                    handle(message, peer)
        except (ValueError, TimeoutError, ConnectionError, ssl.SSLError) as exc:  # FramingError is a ValueError
            log.info("SIP %s from %s closed: %s", name, remote[0], exc)
        finally:
            if task is not None:
                listener.connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    listener.server = await asyncio.start_server(connection, host, port, ssl=tls)
    return listener


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """The server side of SIP over TLS: the configured certificate chain and key (PEM files)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx
