"""Real Redis and real gateway replicas on free ports, for the cluster tests and ``bench replicas``.

``RedisServer``: Debian's ``redis-server`` with no persistence in a temp dir (restartable on the
same port, which loses everything, as a restarted cache-only Redis does). ``replica``: a gateway
process sharing sessions through it (``testkit.serve_fake`` on the fake model, or
``stream-omni serve`` on the embedded one)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from testkit.live_server import count_server, free_port
from testkit.remote_engines import EngineProcess


class RedisServer:
    def __init__(self, tmp: Path, port: int | None = None):
        self.tmp = tmp
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self, timeout: float = 20.0) -> RedisServer:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(self.tmp)]
        with (self.tmp / f"redis_{self.port}.log").open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        count_server()
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on {self.port}")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()


def replica(
    tmp: Path,
    redis_url: str,
    *,
    fake: bool = True,
    settings: dict[str, dict[str, Any]] | None = None,
    **fake_args: float,
) -> EngineProcess:
    """A gateway replica on a free port sharing sessions through ``redis_url``; ``settings``: more
    config sections ({"server": {"grace_period_s": 60}, …})."""
    port = free_port()
    conf: dict[str, dict[str, Any]] = {"audio": {"enabled": False}, "replicas": {"store": redis_url}}
    for section, values in (settings or {}).items():
        conf.setdefault(section, {}).update(values)
    cfg = tmp / f"replica_{port}.yaml"
    cfg.write_text(yaml.safe_dump(conf))
    if fake:
        argv = [sys.executable, "-m", "testkit.serve_fake", "--config", str(cfg), "--port", str(port)]
        for name, value in fake_args.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
    else:
        argv = [sys.executable, "-m", "gateway.wiring.cli", "serve", "--config", str(cfg), "--port", str(port)]
    return EngineProcess(argv, port, tmp / f"replica_{port}.log")


@contextlib.contextmanager
def replicas_running(
    tmp: Path, redis_url: str, n: int = 2, settings: dict[str, dict[str, Any]] | None = None, **fake_args: float
) -> Iterator[list[EngineProcess]]:
    """``n`` fake-model replicas started (each ready), all stopped on the way out, even if one failed to start."""
    procs: list[EngineProcess] = []
    try:
        for _ in range(n):
            procs.append(replica(tmp, redis_url, settings=settings, **fake_args).start())
        yield procs
    finally:
        for p in procs:
            p.stop()
