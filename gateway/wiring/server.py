"""uvicorn with a drain: on SIGTERM, stop new sessions, let running responses finish, then close."""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

from ..core.logredact import install_log_redaction


class DrainingServer(uvicorn.Server):
    """``shutdown`` first stops accepting, then waits (bounded) for in-flight responses, then lets
    uvicorn close the sockets; our sessions end with close code 1012 (service restart)."""

    def __init__(self, config: uvicorn.Config, app: Any, drain_timeout_s: float):
        super().__init__(config)
        install_log_redaction()  # uvicorn logs each WebSocket path with its query string (resume tokens)
        self._app = app
        self.drain_timeout_s = drain_timeout_s  # longest wait for running responses

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connections while we drain
        services = getattr(self._app.state, "services", None)
        if services is not None:
            node = getattr(self._app.state, "node", None)  # replicas: sessions are handed to the cluster
            await services.registry.drain(self.drain_timeout_s, hand_off=node.hand_off if node else None)
            await self._app.state.completions.drain(self.drain_timeout_s)
        await super().shutdown(sockets)
