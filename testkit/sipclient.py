"""A scripted SIP caller for tests: raw SIP over UDP or TCP on loopback (INVITE, ACK, CANCEL, BYE, OPTIONS) and RTP.

Just enough of a user agent client to drive the gateway's SIP server through the cases a softphone
will not do on cue: a CANCEL before the answer, RFC 4733 key presses, a BYE from the far side.
"""

# ruff: noqa: ASYNC109  (a per-call timeout is the point of these helpers)

from __future__ import annotations

import asyncio
import secrets
from typing import Any, cast

from sipmessage import Message, Response

from gateway.telephony import rtp
from gateway.telephony.framing import StreamFramer


class _Socket(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.inbox.put_nowait(data)


class _Stream:
    """SIP over TCP: the same inbox of whole messages (framed as the server frames them), one connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.writer = writer
        self.port = int(writer.get_extra_info("sockname")[1])
        self._reading = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        framer = StreamFramer()
        while data := await reader.read(65536):
            for message in framer.feed(data):
                self.inbox.put_nowait(message)

    def close(self) -> None:
        self._reading.cancel()
        self.writer.close()


class SipCaller:
    def __init__(self, sip: _Socket | _Stream, media: _Socket, server: tuple[str, int]):
        self.sip, self.media, self.server = sip, media, server
        self.call_id = secrets.token_hex(8)
        self.tag = secrets.token_hex(4)
        self.cseq = 1
        self.to_tag = ""
        self.requests: list[Message] = []  # requests the server sent us (a BYE)

    @classmethod
    async def open(cls, port: int, transport: str = "udp") -> SipCaller:
        loop = asyncio.get_running_loop()
        sip: _Socket | _Stream
        if transport == "tcp":
            sip = _Stream(*await asyncio.open_connection("127.0.0.1", port))
        else:
            _, sip = await loop.create_datagram_endpoint(_Socket, local_addr=("127.0.0.1", 0))
        _, media = await loop.create_datagram_endpoint(_Socket, local_addr=("127.0.0.1", 0))
        return cls(sip, media, ("127.0.0.1", port))

    def _port(self, s: _Socket | _Stream) -> int:
        if isinstance(s, _Stream):
            return s.port
        assert s.transport is not None
        return int(s.transport.get_extra_info("sockname")[1])

    def offer(self, formats: str = "0 101") -> str:
        lines = ["v=0", "o=- 1 1 IN IP4 127.0.0.1", "s=-", "c=IN IP4 127.0.0.1", "t=0 0"]
        lines += [f"m=audio {self._port(self.media)} RTP/AVP {formats}", "a=rtpmap:0 PCMU/8000"]
        lines += ["a=rtpmap:9 G722/8000", "a=rtpmap:101 telephone-event/8000", "a=sendrecv"]
        return "\r\n".join(lines) + "\r\n"

    def send(
        self, method: str, body: str = "", cseq: int | None = None, headers: list[tuple[str, str]] | None = None
    ) -> None:
        """A request in this call; ``headers``: more of them (Authorization, Session-Expires, …)."""
        me = f"127.0.0.1:{self._port(self.sip)}"
        via = "TCP" if isinstance(self.sip, _Stream) else "UDP"
        to = f"<sip:assistant@{self.server[0]}:{self.server[1]}>" + (f";tag={self.to_tag}" if self.to_tag else "")
        head = [
            f"{method} sip:assistant@{self.server[0]}:{self.server[1]} SIP/2.0",
            f"Via: SIP/2.0/{via} {me};branch=z9hG4bK{secrets.token_hex(6)}",
            f"From: <sip:caller@{me}>;tag={self.tag}",
            f"To: {to}",
            f"Call-ID: {self.call_id}",
            f"CSeq: {cseq or self.cseq} {method}",
            f"Contact: <sip:caller@{me}>",
            "Max-Forwards: 70",
        ]
        head += [f"{name}: {value}" for name, value in headers or []]
        if body:
            head.append("Content-Type: application/sdp")
        head.append(f"Content-Length: {len(body.encode())}")
        data = ("\r\n".join(head) + "\r\n\r\n" + body).encode()
        if isinstance(self.sip, _Stream):
            self.sip.writer.write(data)
            return
        assert self.sip.transport is not None
        self.sip.transport.sendto(data, self.server)

    async def response(self, within: float = 10) -> Response:
        """The next response (requests from the server are kept in ``requests``)."""
        async with asyncio.timeout(within):
            while True:
                msg = Message.parse(await self.sip.inbox.get())
                if isinstance(msg, Response):
                    to = msg.headers.get("To") or ""
                    if ";tag=" in to:
                        self.to_tag = to.split(";tag=")[1].split(";")[0]
                    return msg
                self.requests.append(msg)

    async def final(self, within: float = 20) -> Response:
        while True:
            r = await self.response(within)
            if r.code >= 200:
                return r

    async def request(self, within: float = 10) -> Message:
        """The next request the server sends (a BYE)."""
        if self.requests:
            return self.requests.pop(0)
        async with asyncio.timeout(within):
            while True:
                msg = Message.parse(await self.sip.inbox.get())
                if not isinstance(msg, Response):
                    return msg

    def reply(self, request: Message, code: int = 200, phrase: str = "OK") -> None:
        """Answer a request the server sent (its UPDATE, REFER): the headers a response echoes, no body."""
        answer = Response(code, phrase)
        for name in ("Via", "From", "To", "Call-ID", "CSeq"):
            for value in request.headers.getlist(name):
                answer.headers.add(name, value)
        answer.headers.add("Content-Length", "0")
        if isinstance(self.sip, _Stream):
            self.sip.writer.write(bytes(answer))
        else:
            assert self.sip.transport is not None
            self.sip.transport.sendto(bytes(answer), self.server)

    def key(self, digit: int, timestamp: int, seq: int) -> None:
        """One RFC 4733 event as a phone sends it: start, then the end packet three times."""
        assert self.media.transport is not None
        dest = self.rtp_dest
        for n, end in enumerate([False, True, True, True]):
            payload = bytes([digit, 0x8A if end else 0x0A, 0, 160])
            self.media.transport.sendto(rtp.build(101, seq + n, timestamp, 42, payload, n == 0), dest)

    rtp_dest: tuple[str, int] = ("127.0.0.1", 0)

    async def say(self, ulaw: bytes, seq: int = 1000, timestamp: int = 0) -> None:
        """Stream µ-law as RTP (PCMU) in real time, 20 ms a packet."""
        assert self.media.transport is not None
        loop = asyncio.get_running_loop()
        due = loop.time()
        for n, i in enumerate(range(0, len(ulaw), 160)):
            packet = rtp.build(0, seq + n, timestamp + i, 42, ulaw[i : i + 160], n == 0)
            self.media.transport.sendto(packet, self.rtp_dest)
            due += 0.02
            await asyncio.sleep(max(0.0, due - loop.time()))

    async def heard(self, within: float) -> rtp.Packet:
        """The next RTP packet from the gateway."""
        async with asyncio.timeout(within):
            while True:
                packet = rtp.parse(await self.media.inbox.get())
                if packet is not None:
                    return packet

    def close(self) -> None:
        if isinstance(self.sip, _Stream):
            self.sip.close()
        elif self.sip.transport is not None:
            self.sip.transport.close()
        if self.media.transport is not None:
            self.media.transport.close()
