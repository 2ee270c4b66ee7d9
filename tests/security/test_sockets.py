"""Half-open, slow, over-size and dead sockets cost nothing, and /health answers throughout.

How fast it answers under each attack is measured by ``python -m bench.security_bench``, not here."""

from __future__ import annotations

import json
import os
import socket
import time

import psutil
import pytest

from .conftest import health_latency, raw_exchange, upgrade_request

FAST = {
    "audio.enabled": False,
    "server.header_timeout_s": 1.0,
    "server.close_timeout_s": 1.0,
    "server.max_pending_per_ip": 1000,
}


def _connect(addr: str) -> socket.socket:
    host, port = addr.split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes (fails if it has not closed within ``timeout``)."""
    sock.settimeout(timeout)
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def _server_sockets(port: int, status: str = psutil.CONN_ESTABLISHED) -> int:
    """Sockets of this process (the server runs in-process) on the server's port in ``status``."""
    return sum(
        1 for c in psutil.Process(os.getpid()).net_connections("tcp") if c.laddr.port == port and c.status == status
    )


def test_over_size_websocket_header_line_gets_431(fake, server_factory):
    with server_factory(fake, **FAST) as addr:
        answer = raw_exchange(addr, upgrade_request(addr, extra=f"X-Big: {'a' * 9000}\r\n"))
        assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
        assert health_latency(addr) < 5.0  # /health still answers after the refused upgrade


def test_over_size_request_head_gets_431(fake, server_factory):
    with server_factory(fake, **FAST) as addr:
        head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"b" * 1000) for i in range(20))
        sock = _connect(addr)
        sock.sendall(head)  # no blank line: the head never ends
        assert _read_until_closed(sock, 5).startswith(b"HTTP/1.1 431")
        sock.close()


def test_silent_and_slow_connections_are_closed_after_the_header_deadline(fake, server_factory):
    with server_factory(fake, **FAST) as addr:
        silent = [_connect(addr) for _ in range(200)]
        slow = [_connect(addr) for _ in range(20)]
        t0 = time.monotonic()
        assert health_latency(addr) < 5.0  # /health answers while 220 sockets hold a head open
        for s in slow:  # the attack: a byte at a time, never a whole head
            s.sendall(b"G")
        for s in slow:
            s.sendall(b"ET / HTTP/1.1\r\nX: ")
        for s in silent + slow:
            assert _read_until_closed(s, 5).startswith(b"HTTP/1.1 408")
            s.close()
        assert time.monotonic() - t0 < 10  # a stall guard, far above the 1 s deadline
        assert health_latency(addr) < 5.0  # and after they were closed


def test_keep_alive_connections_owe_the_next_head_in_time_too(fake, server_factory):
    with server_factory(fake, **FAST) as addr:
        sock = _connect(addr)
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n".encode())
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /health HTTP/1.1\r\n")  # then nothing more
        rest = _read_until_closed(sock, 5)
        assert b"HTTP/1.1 408" in rest  # (after the rest of the first response's body, if any)
        sock.close()


def test_pending_sockets_per_address_and_open_sockets_are_capped(fake, server_factory):
    with server_factory(fake, **{**FAST, "server.max_pending_per_ip": 5, "server.header_timeout_s": 30}) as addr:
        held = [_connect(addr) for _ in range(5)]
        extra = _connect(addr)
        assert _read_until_closed(extra, 5).startswith(b"HTTP/1.1 503")
        for s in [*held, extra]:
            s.close()
    with server_factory(fake, **{**FAST, "server.max_connections": 8, "server.header_timeout_s": 30}) as addr:
        held = [_connect(addr) for _ in range(8)]
        extra = _connect(addr)
        assert _read_until_closed(extra, 5).startswith(b"HTTP/1.1 503")
        for s in [*held, extra]:
            s.close()


def _ws_frame(text: str) -> bytes:
    """One masked client text frame (RFC 6455 §5.2)."""
    payload = text.encode()
    n = len(payload)
    head = bytes([0x81]) + (
        bytes([0x80 | n])
        if n < 126
        else bytes([0x80 | 126]) + n.to_bytes(2, "big")
        if n < 65536
        else bytes([0x80 | 127]) + n.to_bytes(8, "big")
    )
    mask = b"\x01\x02\x03\x04"
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@pytest.mark.parametrize("grace", [0.0, 30.0])
def test_a_client_that_never_reads_is_aborted_after_the_close_timeout(fake, server_factory, grace):
    conf = {
        **FAST,
        "server.grace_period_s": grace,
        "limits.outbound_queue": 4,
        "limits.send_stall_s": 0.5,
    }
    with server_factory(fake, **conf) as addr:
        port = int(addr.split(":")[1])
        sock = _connect(addr)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(upgrade_request(addr))
        text = "x" * 200_000
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        frame = _ws_frame(json.dumps({"type": "conversation.item.create", "item": item}))
        try:
            for _ in range(60):  # ≈ 24 MB of echoes the client never reads
                sock.sendall(frame)
        except (ConnectionResetError, BrokenPipeError):
            pass  # already aborted by the server: what this test wants
        deadline = time.monotonic() + 20
        while _server_sockets(port) > 0:  # the server's end of our socket: gone once aborted
            assert time.monotonic() < deadline, "the server still holds the dead client's socket"
            time.sleep(0.05)
        assert health_latency(addr) < 5.0  # /health answers once the dead client is gone
        sock.close()
        assert addr.call(lambda: addr.services.engine.depth) == (0, 0)
