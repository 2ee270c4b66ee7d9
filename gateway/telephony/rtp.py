"""RTP for a phone call (RFC 3550): packets both ways, a small reordering jitter buffer, RFC 4733 DTMF. Pure.

G.711 at 8 kHz, 20 ms a packet (160 samples, timestamp +160). The server only listens to the caller
(VAD, Whisper), so the buffer holds a few packets to put them back in order and drops one that
comes after its turn; a lost packet is skipped (20 ms now and then costs recognition nothing).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct("!BBHII")  # V/P/X/CC, M/PT, sequence, timestamp, SSRC
DTMF_KEYS = "0123456789*#ABCD"  # RFC 4733 events 0-15


@dataclass(frozen=True)
class Packet:
    payload_type: int
    seq: int
    timestamp: int
    ssrc: int
    marker: bool
    payload: bytes


def parse(data: bytes) -> Packet | None:
    """One RTP packet (version 2), or None for anything else (RTCP, junk)."""
    if len(data) < HEADER.size:
        return None
    b0, b1, seq, ts, ssrc = HEADER.unpack_from(data)
    if b0 >> 6 != 2 or 72 <= (b1 & 0x7F) <= 76:  # not RTP v2, or RTCP (PT 200-204 with the marker bit)
        return None
    start = HEADER.size + 4 * (b0 & 0x0F)
    if b0 & 0x10:  # a header extension: its length in 32-bit words follows its 16-bit profile id
        if len(data) < start + 4:
            return None
        start += 4 + 4 * struct.unpack_from("!H", data, start + 2)[0]
    end = len(data)
    if b0 & 0x20 and end > start:  # padding: its count is the last byte
        end -= data[-1]
    if start > end:
        return None
    return Packet(b1 & 0x7F, seq, ts, ssrc, bool(b1 & 0x80), data[start:end])


def build(payload_type: int, seq: int, timestamp: int, ssrc: int, payload: bytes, marker: bool = False) -> bytes:
    return (
        HEADER.pack(0x80, (0x80 if marker else 0) | payload_type, seq & 0xFFFF, timestamp & 0xFFFFFFFF, ssrc) + payload
    )


def _newer(a: int, b: int) -> bool:
    """Sequence number ``a`` comes after ``b`` (16-bit wrap-around)."""
    return 0 < (a - b) & 0xFFFF < 0x8000


class JitterBuffer:
    def __init__(self, depth: int = 3):
        self.depth = depth  # packets held to reorder (20 ms each)
        self._held: dict[int, bytes] = {}
        self._next: int | None = None  # the sequence number due next
        self.late = 0  # packets dropped for arriving after their turn
        self.lost = 0  # packets skipped as lost

    def push(self, seq: int, payload: bytes) -> list[bytes]:
        """A packet in; the payloads now due, in order."""
        if self._next is None:
            self._next = seq
        if seq != self._next and not _newer(seq, self._next):
            self.late += 1
            return []
        self._held[seq] = payload
        out: list[bytes] = []
        while self._held:
            if self._next in self._held:
                out.append(self._held.pop(self._next))
                self._next = (self._next + 1) & 0xFFFF
            elif len(self._held) > self.depth:  # waited long enough: the missing one is lost
                self.lost += 1
                self._next = (self._next + 1) & 0xFFFF
            else:
                break
        return out


class DtmfReceiver:
    """RFC 4733 telephone-events: one key per event (its packets repeat, the end one three times)."""

    def __init__(self) -> None:
        self._seen: int | None = None  # timestamp of the last event reported

    def push(self, packet: Packet) -> str | None:
        """The key pressed, once per event; None for its other packets."""
        if len(packet.payload) < 4 or packet.payload[0] >= len(DTMF_KEYS):
            return None
        if packet.timestamp == self._seen:
            return None
        self._seen = packet.timestamp
        return DTMF_KEYS[packet.payload[0]]
