"""Real headless Chromium (Debian's, driven by Playwright for Python) against a real server.

No browser is downloaded: Playwright launches ``/usr/bin/chromium`` (Debian package
``chromium``) through ``executable_path``. Tests that need it skip, naming what is missing,
only outside CI; in CI a missing Chromium or Playwright fails them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = os.path.exists(CHROMIUM)
try:
    import playwright.sync_api  # noqa: F401

    HAVE_PLAYWRIGHT = True
except ImportError:
    HAVE_PLAYWRIGHT = False

_missing = [
    what
    for what, ok in (
        ("Debian chromium (apt-get install chromium)", HAVE_CHROMIUM),
        ("Playwright for Python (pip install playwright==1.65.2)", HAVE_PLAYWRIGHT),
    )
    if not ok
]
requires_browser = pytest.mark.skipif(
    bool(_missing and not os.environ.get("CI")), reason="missing: " + ", ".join(_missing)
)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"

# the flags the machine notes ask for: no sandbox as root, no GPU, no calls home, fresh profile
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--autoplay-policy=no-user-gesture-required",
]


def fake_microphone_args(wav: Path) -> list[str]:
    """Chromium flags that make getUserMedia read ``wav`` (looped) instead of a microphone."""
    return [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
    ]


class SlowBackend:
    """A backend whose every forward step takes at least ``delay_s``: replies last long enough
    for a person (or a test) to press Stop or lose the connection in the middle of one."""

    def __init__(self, inner: Any, delay_s: float):
        self._inner = inner
        self._delay_s = delay_s

    def forward(self, state: Any, tokens: list[int], n_logits: int = 1) -> Any:
        time.sleep(self._delay_s)
        return self._inner.forward(state, tokens, n_logits)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass(eq=False)
class _Pair:
    client: socket.socket
    upstream: socket.socket
    threads: list[threading.Thread] = field(default_factory=list)
    open_directions: int = 2


class TcpProxy:
    """A loopback TCP relay in front of the server, so a test can cut every connection at once
    (the browser sees its socket die with no close frame, the server sees its peer vanish) and
    refuse new ones for a while — a network failure in the middle of a reply."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.1)
        self.port = int(self.listener.getsockname()[1])
        self.target: tuple[str, int] | None = None
        self.refusing = False
        self.kills = 0
        self._pairs: set[_Pair] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self._thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def forward_to(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.target = (host, int(port))

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.refusing or self.target is None:
                _hard_close(conn)
                continue
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                _hard_close(conn)
                continue
            conn.settimeout(None)
            up.settimeout(None)
            pair = _Pair(conn, up)
            with self._lock:
                self._pairs.add(pair)
            for src, dst in ((conn, up), (up, conn)):
                t = threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True)
                pair.threads.append(t)
                t.start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            self._drop(pair)  # reset or killed: cut both sides
            return
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)  # a clean end of one direction is passed on as such
        with self._lock:
            pair.open_directions -= 1
            last = pair.open_directions == 0
        if last:
            self._drop(pair, hard=False)

    def _drop(self, pair: _Pair, hard: bool = True) -> None:
        with self._lock:
            known = pair in self._pairs
            self._pairs.discard(pair)
        if known:
            for s in (pair.client, pair.upstream):
                if hard:
                    _hard_close(s)
                else:
                    s.close()

    def kill_all(self) -> int:
        """Cut every relayed connection now (RST, no WebSocket close frame); returns how many."""
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair)
        self.kills += len(pairs)
        return len(pairs)

    def close(self) -> None:
        self._closed = True
        self.kill_all()
        self._thread.join(5)
        self.listener.close()


def _hard_close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()


@contextlib.contextmanager
def tcp_proxy() -> Iterator[TcpProxy]:
    proxy = TcpProxy()
    try:
        yield proxy
    finally:
        proxy.close()


class Recorder:
    """What a page did: WebSocket frames both ways (parsed JSON), sockets opened, console
    errors, uncaught exceptions, and any dialog (alert/confirm/prompt) it tried to show."""

    def __init__(self, page: Any):
        self.sent: list[Any] = []
        self.received: list[dict[str, Any]] = []
        self.binary_sizes: list[int] = []
        self.sockets: list[str] = []
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("websocket", self._on_ws)
        page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.on("dialog", self._on_dialog)

    def _on_dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def _on_ws(self, ws: Any) -> None:
        import json

        self.sockets.append(ws.url)

        def sent(payload: str | bytes) -> None:
            if isinstance(payload, bytes):
                self.binary_sizes.append(len(payload))
            else:
                self.sent.append(json.loads(payload))

        def received(payload: str | bytes) -> None:
            if isinstance(payload, str):
                self.received.append(json.loads(payload))

        ws.on("framesent", sent)
        ws.on("framereceived", received)

    def sent_of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.sent if isinstance(e, dict) and e.get("type") == type_]

    def received_of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.received if e.get("type") == type_]

    def unexpected_console_errors(self, allow: tuple[str, ...] = ()) -> list[str]:
        return [m for m in self.console_errors if not any(a in m for a in allow)]
