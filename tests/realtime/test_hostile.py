"""A hostile raw-socket client: broken frames, floods and half-open TCP never take the server down,
and another session keeps streaming meanwhile."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct

import pytest

from testkit.fake_backend import FakeBackend
from tests.wsclient import RealtimeClient


def handshake(addr: str, rcvbuf: int | None = None) -> socket.socket:
    host, port = addr.split(":")
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        f"GET /v1/realtime HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    s.settimeout(10)
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert b" 101 " in head.split(b"\r\n")[0]
    return s


def frame(payload: bytes, opcode: int = 0x1, masked: bool = True, declared: int | None = None) -> bytes:
    n = len(payload) if declared is None else declared
    if n < 126:
        hdr = bytes([0x80 | opcode, (0x80 if masked else 0) | n])
    elif n < 65536:
        hdr = bytes([0x80 | opcode, (0x80 if masked else 0) | 126]) + struct.pack(">H", n)
    else:
        hdr = bytes([0x80 | opcode, (0x80 if masked else 0) | 127]) + struct.pack(">Q", n)
    if not masked:
        return hdr + payload
    mask = os.urandom(4)
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def closed_by_server(s: socket.socket, limit_s: float = 15) -> bool:
    """True once the server ends the TCP connection (EOF or reset) within ``limit_s``."""
    s.settimeout(limit_s)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


ATTACKS = {
    "invalid_utf8": lambda: frame(b'{"type":"\xff\xfe"}'),
    "unmasked": lambda: frame(b'{"type":"response.cancel"}', masked=False),
    "oversize_declared": lambda: frame(b"x" * 10, declared=2**40),
    "reserved_opcode": lambda: frame(b"{}", opcode=0x3),
    "fragmented_garbage": lambda: bytes([0x01, 0x85]) + os.urandom(4) + b"abcde" + bytes([0x81, 0x81]) + os.urandom(5),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_broken_frames_close_only_the_attacker(attack, server_factory):
    fake = FakeBackend(answer_tokens=200, step_s=0.003)
    with server_factory(fake, **{"audio.enabled": False}) as addr:
        good = await RealtimeClient.connect(addr, query="")
        await good.until("session.created")
        await good.say("stream please")
        await good.send({"type": "response.create", "response": {"scheduler": {"strategy": "fast"}}})
        await good.until("response.output_text.delta")
        bad = await asyncio.to_thread(handshake, addr)
        bad.sendall(ATTACKS[attack]())
        assert await asyncio.to_thread(closed_by_server, bad)
        bad.close()
        done = await good.until("response.done")
        assert done["response"]["status"] == "completed"  # the neighbour streamed to the end
        assert (await good.ask("again?"))["response"]["status"] == "completed"
        await good.close()


async def test_ping_flood_and_half_open_tcp_do_not_stall_others(server_factory):
    fake = FakeBackend(answer_tokens=120, step_s=0.003)
    with server_factory(fake, **{"audio.enabled": False}) as addr:
        half_open = []
        for _ in range(20):  # connect, send half a handshake, then go silent
            s = socket.create_connection(tuple([addr.split(":")[0], int(addr.split(":")[1])]))
            s.sendall(b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\n")
            half_open.append(s)
        flood = await asyncio.to_thread(handshake, addr, 4096)
        await asyncio.to_thread(flood.sendall, b"".join(frame(b"x" * 100, opcode=0x9) for _ in range(2000)))
        good = await RealtimeClient.connect(addr, query="")
        await good.until("session.created")
        done = await good.ask("are you still there?")
        assert done["response"]["status"] == "completed" and good.text_of(done["response"]["id"])
        for s in half_open:
            s.close()
        flood.close()
        await good.close()
