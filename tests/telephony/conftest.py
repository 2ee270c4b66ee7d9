"""Fixtures of the telephony tests: a webhook receiver on loopback, as an application's would be."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from testkit.tls import self_signed as make_self_signed

Hooks = tuple[str, "queue.Queue[tuple[bytes, dict[str, str]]]"]


@pytest.fixture
def receiver() -> Iterator[Hooks]:
    """A webhook receiver on 127.0.0.1: its URL, and each POST's body and (lower-cased) headers in a queue."""
    got: queue.Queue[tuple[bytes, dict[str, str]]] = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            got.put((body, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/hooks", got
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def self_signed(tmp_path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (PEM files: certificate, key), made fresh for the test."""
    cert, key = make_self_signed(tmp_path)
    return str(cert), str(key)
