"""A SIP call's RTP on its own UDP socket: 20 ms G.711 packets out as the call paces them (a mark is played
as soon as it is sent: no buffer at the far end to wait for), the caller's packets through a reordering
jitter buffer, RFC 4733 key presses as DTMF."""

from __future__ import annotations

import asyncio
import secrets
from typing import cast

from . import phone_sdp as sdp
from . import rtp
from .call import PhoneCall

Addr = tuple[str, int]


class RtpLine(asyncio.DatagramProtocol):
    """A call's RTP: frames out to the caller's address, the caller's audio and keys into ``call``."""

    def __init__(self, offer: sdp.PhoneOffer, jitter_depth: int = 3):
        self.codec = offer.codec
        self.lead_frames = 0  # a phone's jitter buffer is tens of ms and its own: frames go out on the clock
        self.offer = offer
        self.remote: Addr = (offer.address, offer.port)
        self.call: PhoneCall | None = None
        self.transport: asyncio.DatagramTransport | None = None
        self.jitter = rtp.JitterBuffer(jitter_depth)
        self.dtmf = rtp.DtmfReceiver()
        self._ssrc = secrets.randbits(32)
        self._seq = secrets.randbits(16)
        self._ts = secrets.randbits(32)
        self._first = True
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # (uvloop's is not the class itself)

    @property
    def port(self) -> int:
        assert self.transport is not None
        return int(self.transport.get_extra_info("sockname")[1])

    def datagram_received(self, data: bytes, addr: Addr) -> None:
        packet = rtp.parse(data)
        call = self.call
        if packet is None or call is None:
            return
        self.received += 1
        if packet.payload_type == self.offer.dtmf_type:
            key = self.dtmf.push(packet)
            if key is not None:
                call.on_dtmf(key)
        elif packet.payload_type == self.offer.payload_type:
            for payload in self.jitter.push(packet.seq, packet.payload):
                call.on_audio(payload)

    async def send(self, frames: list[bytes | str]) -> None:
        for f in frames:
            if isinstance(f, str):
                if self.call is not None:
                    self.call.on_mark(f)  # sent is played: nothing buffers it on the way
                continue
            if self.transport is not None and self.offer.direction in ("sendrecv", "recvonly"):
                packet = rtp.build(self.offer.payload_type, self._seq, self._ts, self._ssrc, f, self._first)
                self.transport.sendto(packet, self.remote)
            self._first = False
            self._seq = (self._seq + 1) & 0xFFFF
            self._ts = (self._ts + len(f)) & 0xFFFFFFFF

    async def clear(self) -> None:
        self._first = True  # the next talkspurt starts with the marker bit

    async def close(self, reason: str) -> None:
        if self.transport is not None:
            self.transport.close()
