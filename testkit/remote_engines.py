"""Real engine processes on free ports for the remote backend (backend: openai), and one small
misbehaving server for the fault cases a real engine cannot be made to show on demand: for the
tests (tests/engine/test_remote.py) and ``stream-omni bench remote``."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from testkit.server import free_port, run_server

ROOT = Path(__file__).resolve().parent.parent


class EngineProcess:
    """A running engine: ``base_url`` (…/v1), its port, and the process (to kill it mid-response)."""

    def __init__(self, argv: list[str], port: int, log: Path, env: dict[str, str] | None = None):
        self.argv, self.port, self.log, self.env = argv, port, log, env
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> EngineProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(self.env or {})}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while True:  # ready when its model list answers
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"engine did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: the engine dies as a crashed one does, mid-whatever."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def llama_server(tmp: Path, port: int | None = None) -> EngineProcess:
    """llama-cpp-python's own OpenAI server on the embedded GGUF (extra ``llama-cpp-python[server]``)."""
    from models.llm import embedded_gguf

    port = port or free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf()), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--n_threads", "1", "--n_ctx", "2048", "--model_alias", "smollm2-engine"]
    argv += ["--interrupt_requests", "false"]  # queue concurrent requests instead of cutting the running one short
    return EngineProcess(argv, port, tmp / f"llama_server_{port}.log")


def stream_omni_engine(tmp: Path) -> EngineProcess:
    """A second ``stream-omni serve`` (embedded model on llama.cpp, no audio) as the engine."""
    port = free_port()
    cfg = tmp / f"engine_{port}.yaml"
    cfg.write_text("audio:\n  enabled: false\nmodel:\n  threads: 1\n  served_name: omni-engine\n")
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg), "--port", str(port)]
    return EngineProcess(argv, port, tmp / f"stream_omni_{port}.log")


def remote_config(base_url: str, **overrides: Any) -> Any:
    """configs/remote.yaml (the documented example) pointed at ``base_url``."""
    from gateway.config import load_config

    base = {"model.base_url": base_url, "audio.enabled": False, "model.startup_wait_s": 0, "server.port": None}
    return load_config(ROOT / "configs" / "remote.yaml", **{**base, **overrides})


@contextlib.contextmanager
def gateway(base_url: str, **overrides: Any) -> Iterator[Any]:
    """Our gateway (real uvicorn, free port) with the engine at ``base_url`` as its model."""
    from gateway.loading import default_loader

    with run_server(remote_config(base_url, **overrides), None, loader=default_loader) as addr:
        yield addr


# ---------------------------------------------------------------------- /proc/net/tcp


def tcp_states(port: int) -> dict[tuple[int, int], str]:
    """Loopback TCP sockets touching ``port``: (local port, remote port) → state (ESTABLISHED, …)."""
    names = {"01": "ESTABLISHED", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE"}
    names |= {"08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
    out: dict[tuple[int, int], str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                f = row.split()
                lport, rport = int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16)
                if port in (lport, rport):
                    out[(lport, rport)] = names.get(f[3], f[3])
    return out


# ---------------------------------------------------------------------- a misbehaving engine


class BadEngine:
    """An OpenAI-looking server that answers GET /models properly and then misbehaves on
    /chat/completions as ``mode`` says: ``429`` / ``503`` (busy), ``context`` (400: prompt too long),
    ``json`` (ignores ``stream: true``), ``stall`` (headers and one delta, then silence), ``hang``
    (accepts, never answers). Raw sockets: exactly the bytes we choose."""

    def __init__(self, mode: str):
        self.mode = mode
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._srv = socket.create_server(("127.0.0.1", self.port))
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self._srv.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with contextlib.suppress(OSError):
            while not self._stop.is_set():
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                buf = rest[length:]
                if head.startswith(b"GET"):
                    body = b'{"object": "list", "data": [{"id": "bad-engine", "object": "model"}]}'
                    conn.sendall(self._response(b"200 OK", body))
                elif self.mode == "context":  # as vLLM refuses a prompt that does not fit
                    msg = b'{"error": {"message": "This model\'s maximum context length is 2048 tokens at 10.1.2.3"}}'
                    conn.sendall(self._response(b"400 Bad Request", msg))
                elif self.mode == "json":  # ignores stream: true
                    conn.sendall(self._response(b"200 OK", b'{"choices": [{"message": {"content": "hi"}}]}'))
                elif self.mode in ("429", "503"):
                    status = b"429 Too Many Requests" if self.mode == "429" else b"503 Service Unavailable"
                    conn.sendall(self._response(status, b'{"error": {"message": "busy at 10.1.2.3:9000"}}'))
                elif self.mode == "stall":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                    )
                    event = b'data: {"choices": [{"index": 0, "delta": {"content": "Hello"}}]}\n\n'
                    conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
                    self._stop.wait()
                    return
                else:  # hang: never answer
                    self._stop.wait()
                    return

    @staticmethod
    def _response(status: bytes, body: bytes) -> bytes:
        head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % (status, len(body))
        return head + body

    def close(self) -> None:
        self._stop.set()
        self._srv.close()
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.close()
        self._thread.join(2)
