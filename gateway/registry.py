"""Live sessions by resume token; grace-period expiry; the drain on shutdown."""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import TYPE_CHECKING

from .live import LiveSession, key_digest

if TYPE_CHECKING:
    from .app import Services

log = logging.getLogger("stream_omni.registry")


class TooManySessions(Exception):
    pass


class SessionRegistry:
    def __init__(self, grace_period_s: float, max_sessions: int):
        self.grace_period_s = grace_period_s  # how long a detached session waits for a resume
        self.max_sessions = max_sessions  # live sessions (attached or waiting) at once
        self.sessions: dict[str, LiveSession] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.draining = False  # shutdown started: no new sessions

    def __len__(self) -> int:
        return len(self.sessions)

    def create(self, services: Services, api_key: str | None) -> LiveSession:
        if self.draining:
            raise TooManySessions("server is shutting down")
        if len(self.sessions) >= self.max_sessions:
            raise TooManySessions("too many sessions")
        digest = key_digest(api_key)
        per_key = services.config.limits.max_sessions_per_key
        keyed = bool(services.config.server.api_keys)
        if keyed and sum(1 for s in self.sessions.values() if s.key == digest) >= per_key:
            raise TooManySessions("too many sessions for this API key")
        live = LiveSession(services, api_key)
        self.sessions[live.token] = live
        return live

    def find(self, token: str, api_key: str | None) -> LiveSession | None:
        """The session for ``token`` if it is alive and was created with the same API key."""
        live = self.sessions.get(token)
        if live is None or live.closed or not hmac.compare_digest(live.key, key_digest(api_key)):
            return None
        timer = self._timers.pop(token, None)
        if timer is not None:
            timer.cancel()
        return live

    def detached(self, live: LiveSession) -> None:
        """Its socket is gone: keep it for the grace period (0: end it now)."""
        if live.closed:
            self.sessions.pop(live.token, None)
            return
        if self.grace_period_s <= 0 or self.draining:
            self._end(live, "client_disconnected")
            return
        live.detached_at = asyncio.get_running_loop().time()
        self._timers[live.token] = asyncio.get_running_loop().call_later(
            self.grace_period_s, self._expire, live
        )

    def _expire(self, live: LiveSession) -> None:
        self._timers.pop(live.token, None)
        if live.attached is None:
            self._end(live, "session_expired")

    def _end(self, live: LiveSession, reason: str) -> None:
        live.close(reason)
        self.sessions.pop(live.token, None)
        timer = self._timers.pop(live.token, None)
        if timer is not None:
            timer.cancel()

    def busy(self) -> int:
        return sum(1 for s in self.sessions.values() if s.busy)

    async def drain(self, timeout_s: float, flush_s: float = 2.0) -> None:
        """Shutdown: refuse new sessions, let running responses finish (bounded), then end all and
        let each attached socket send what its session still holds (bounded by ``flush_s``) before
        uvicorn closes the sockets — or a finished response's ``response.done`` could be lost."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.busy() and loop.time() < deadline:  # noqa: ASYNC110 (bounded poll of engine-side state)
            await asyncio.sleep(0.05)
        writers = []
        for live in list(self.sessions.values()):
            writer = getattr(live.attached, "writer", None)
            if writer is not None:
                writers.append(writer)
            self._end(live, "server_shutdown")
        if writers:  # each returns once it has sent everything (the session is closed)
            await asyncio.wait(writers, timeout=flush_s)
