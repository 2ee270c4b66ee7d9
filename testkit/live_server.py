"""A real uvicorn serving ``create_app`` on a free loopback port, in a thread: for tests and benchmarks."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .loopwatch import SERVER_STALLS, watch_loop

# servers this process has started (uvicorn threads, engine and Redis subprocesses): the test suite
# checks that a test which starts one carries the `server` marker (tests/conftest.py)
servers_started = 0


def count_server() -> None:
    global servers_started
    servers_started += 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerAddr(str):
    """'host:port' of a running test server, with handles for tests that poke at the server side."""

    app: Any
    server: Any

    def call(self, fn: Callable[[], Any], timeout: float = 10) -> Any:
        """Run ``fn`` on the server's event loop thread and return its result."""
        import concurrent.futures

        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return fut.result(timeout)

    loop: Any = None

    @property
    def services(self) -> Any:
        return self.app.state.services


@contextmanager
def run_server(config: Any, backend: Any, loader: Callable[[Any], Any] | None = None) -> Iterator[ServerAddr]:
    """A real uvicorn serving create_app(config) on a free loopback port; yields 'host:port'.

    The app gets ``backend`` (or whatever ``loader(config)`` returns, called on the engine thread)."""
    import uvicorn

    from gateway.wiring.app import create_app
    from gateway.wiring.cli import uvicorn_config_kwargs
    from gateway.wiring.server import DrainingServer

    port = free_port()
    app = create_app(config, backend_loader=loader or (lambda _cfg: backend))
    kwargs = uvicorn_config_kwargs(config)
    kwargs["log_level"] = "warning"
    uv = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", **kwargs)
    server = DrainingServer(uv, app, config.server.shutdown_timeout_s)

    def serve() -> None:
        import asyncio

        loop = asyncio.new_event_loop()
        server._stream_omni_loop = loop  # type: ignore[attr-defined]
        try:
            loop.run_until_complete(server.serve())
        finally:
            loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    count_server()
    deadline = time.monotonic() + 120  # model loading on a busy 2-core machine can take a minute
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    addr = ServerAddr(f"127.0.0.1:{port}")
    addr.app, addr.server = app, server
    addr.loop = getattr(server, "_stream_omni_loop", None)
    try:
        # watched while it serves (start-up aside): a stall fails the test it happened in (tests/conftest.py)
        with watch_loop(addr.loop, log=SERVER_STALLS) if addr.loop else contextlib.nullcontext():
            yield addr
    finally:
        server.should_exit = True
        thread.join(15)
