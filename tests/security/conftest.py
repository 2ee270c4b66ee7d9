"""Helpers for the adversarial suite: a fake backend, a /health prober that measures latency."""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

import httpx
import pytest

from testkit.fake_backend import FakeBackend

TWO_KEYS = {"audio.enabled": False, "server.api_keys": ["key-alice", "key-bob"]}


@pytest.fixture(scope="module")
def fake() -> Any:
    return FakeBackend(answer_tokens=30, step_s=0.002)


def health_latency(addr: str, timeout: float = 5.0) -> float:
    """Seconds one GET /health took on a fresh connection (fails when it takes over ``timeout``)."""
    t0 = time.perf_counter()
    r = httpx.get(f"http://{addr}/health", timeout=timeout)
    assert r.status_code == 200
    return time.perf_counter() - t0


def upgrade_request(host: str, path: str = "/v1/realtime", extra: str = "") -> bytes:
    """A WebSocket upgrade written by hand (client libraries set Host and headers themselves)."""
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    ).encode()


def raw_exchange(addr: str, request: bytes, timeout: float = 5.0) -> bytes:
    """Send ``request`` on a fresh TCP connection; what the server answers until it closes or ``timeout``."""
    host, port = addr.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        out = b""
        with contextlib.suppress(TimeoutError):
            while chunk := sock.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out:
                    break
        return out
