"""/health latency under each attack docs/OPERATING.md guards against, on `stream-omni serve` (embedded model).

For each attack the server is probed with GET /health (a fresh connection each time, like any
client) every 50 ms while the attack runs; the table gives the median and the worst probe. Run:
``python -m bench.security_bench``; writes bench/results/security.{json,md}. Image-decode memory is
measured separately (bench/security_images.py).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.common import machine, markdown_table, median, server_process, write

CONF = {
    "audio.enabled": False,
    "speculative.drafter": "none",
    "server.api_keys": ["key-alice", "key-bob"],
    "server.header_timeout_s": 10.0,
    "server.max_pending_per_ip": 1000,  # the attacks come from one address: measure the loop, not that cap
}
AUTH = "Authorization: Bearer key-bob\r\n"


def probe(addr: str, stop: threading.Event, out: list[float]) -> None:
    """GET /health on a fresh raw connection (no client-library overhead in the number) from
    127.0.0.2, so the per-address cap on pending sockets that the attacks hit is not ours."""
    host, port = addr.split(":")
    request = f"GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n".encode()
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            with socket.create_connection((host, int(port)), timeout=10, source_address=("127.0.0.2", 0)) as s:
                s.sendall(request)
                answer = b""
                while chunk := s.recv(4096):
                    answer += chunk
            ok = answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"status":"ok"}')
            out.append(time.perf_counter() - t0 if ok else float("inf"))
        except OSError:
            out.append(float("inf"))
        stop.wait(0.05)


def connect(addr: str) -> socket.socket:
    host, port = addr.split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def upgrade(addr: str, extra: str = "") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET /v1/realtime HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    ).encode()


def frame(text: str) -> bytes:
    data, mask = text.encode(), os.urandom(4)
    n = len(data)
    if n < 126:
        hdr = bytes([0x81, 0x80 | n])
    elif n < 65536:
        hdr = bytes([0x81, 0xFE]) + n.to_bytes(2, "big")
    else:
        hdr = bytes([0x81, 0xFF]) + n.to_bytes(8, "big")
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def ws_open(addr: str) -> socket.socket:
    s = connect(addr)
    s.sendall(upgrade(addr, AUTH))
    assert b" 101 " in s.recv(4096).split(b"\r\n")[0]
    return s


# ---------------------------------------------------------------- attacks (each returns when done)


def idle(addr: str) -> None:
    time.sleep(2)


def silent_and_slow(addr: str) -> None:
    socks = [connect(addr) for _ in range(200)] + [connect(addr) for _ in range(20)]
    for _ in range(3):
        for s in socks[200:]:
            s.sendall(b"X")  # 1 byte a second: never a whole head
        time.sleep(1)
    for s in socks:
        s.close()


def big_header_lines(addr: str) -> None:
    for _ in range(20):
        s = connect(addr)
        s.sendall(upgrade(addr, f"X-Big: {'a' * 9000}\r\n"))
        s.settimeout(10)
        assert s.recv(4096).startswith(b"HTTP/1.1 431")
        s.close()


def conflicting_keys(addr: str) -> None:
    for i in range(50):
        s = connect(addr)
        s.sendall(
            upgrade(
                addr, f"Authorization: Bearer fake-{i}\r\nSec-WebSocket-Protocol: openai-insecure-api-key.key-bob\r\n"
            )
        )
        s.settimeout(10)
        s.recv(4096)
        s.close()


def big_instructions(addr: str) -> None:
    """Instructions at the cap (256 K characters) and items at theirs, then six response.create."""
    s = ws_open(addr)
    s.sendall(frame(json.dumps({"type": "session.update", "session": {"instructions": "be brief " * 28_000}})))
    s.sendall(frame(json.dumps({"type": "session.update", "session": {"instructions": "x" * 7_500_000}})))  # refused
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "word " * 50_000}]}
    for _ in range(4):
        s.sendall(frame(json.dumps({"type": "conversation.item.create", "item": item})))
    for _ in range(6):
        s.sendall(frame('{"type":"response.create","response":{"max_output_tokens":4}}'))
    s.settimeout(0.2)
    end = time.monotonic() + 6
    while time.monotonic() < end:  # read what comes (a reading client), for a while
        try:
            if not s.recv(1 << 20):
                break
        except TimeoutError:
            pass
    s.close()


def never_reads(addr: str) -> None:
    socks = []
    for _ in range(5):
        s = ws_open(addr)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "y" * 200_000}]}
        try:
            for _ in range(20):
                s.sendall(frame(json.dumps({"type": "conversation.item.create", "item": item})))
        except OSError:
            pass
        socks.append(s)
    time.sleep(4)
    for s in socks:
        s.close()


ATTACKS: list[tuple[str, Callable[[str], None]]] = [
    ("no attack", idle),
    ("200 silent + 20 slow (1 byte/s) sockets", silent_and_slow),
    ("20 WebSocket upgrades with a 9 KB header line", big_header_lines),
    ("50 upgrades with conflicting credentials", conflicting_keys),
    ("instructions and items at their caps, 7.5 MB refused, 6 response.create", big_instructions),
    ("5 WebSocket clients that never read (≈ 4 MB echoed each)", never_reads),
]


def main() -> None:
    rows: list[dict[str, Any]] = []
    with server_process(CONF) as addr:
        for what, attack in ATTACKS:
            stop, lat = threading.Event(), []
            t = threading.Thread(target=probe, args=(addr, stop, lat))
            t.start()
            err = ""
            try:
                attack(addr)
            except Exception as exc:  # recorded, not hidden
                err = f"{type(exc).__name__}: {exc}"
            stop.set()
            t.join(15)
            rows.append(
                {
                    "attack": what,
                    "probes": len(lat),
                    "median ms": round(median(lat) * 1000, 1),
                    "max ms": round(max(lat) * 1000, 1),
                    "error": err,
                }
            )
            print(rows[-1], flush=True)
    md = (
        "# /health under attack\n\n"
        f"{machine()}. `stream-omni serve` (embedded model, llama.cpp, two API keys) in its own process; "
        "GET /health on a fresh connection every 50 ms during each attack. Target: every probe under 1 s.\n\n"
        + markdown_table(rows, list(rows[0]))
    )
    write("security", {"machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
