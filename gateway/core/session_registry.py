"""Live sessions by resume token; grace-period expiry; the drain on shutdown."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

log = logging.getLogger("stream_omni.registry")


class Mirrored(Protocol):
    """The session's copy in a shared store (``gateway.cluster.mirror.Mirror``), when there is one."""

    mirrored: int  # the last seq the store holds
    holding: bool  # sockets send only what the store holds (False while it is unavailable)

    def wake(self) -> None:
        """New events (or the end): write them to the store."""
        ...


class StoreUnavailable(Exception):
    """The store sessions are shared through (Redis) did not answer: ``/ready`` is false and new sessions are
    refused (``store_unavailable``). Raised by ``gateway.cluster``; defined here, where its callers can see it."""


class TooManySessions(Exception):
    pass


class Attachment(Protocol):
    """The socket serving a session (``gateway.realtime.connection.Connection``)."""

    @property
    def writer(self) -> asyncio.Task[None] | None:
        """The task sending the session's events; done once it sent all a closed session holds."""
        ...

    def kick(self, code: int, reason: str) -> None:
        """End this socket (not the session) with close ``code``."""
        ...


class Registered(Protocol):
    """What the registry needs of a live session (``gateway.realtime.live_session.LiveSession``)."""

    token: str  # the resume token
    key: str  # digest of the API key it is bound to
    closed: bool
    attached: Attachment | None

    @property
    def busy(self) -> bool: ...

    def close(self, reason: str = ...) -> None: ...


class SessionRegistry:
    def __init__(self, grace_period_s: float, max_sessions: int, max_per_key: int | None = None):
        self.grace_period_s = grace_period_s  # how long a detached session waits for a resume
        self.max_sessions = max_sessions  # live sessions (attached or waiting) at once
        self.max_per_key = max_per_key  # of those, per API key digest (None: no per-key cap)
        self.sessions: dict[str, Registered] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.draining = False  # shutdown started: no new sessions

    def __len__(self) -> int:
        return len(self.sessions)

    def admit(self, key: str) -> None:
        """Raise ``TooManySessions`` unless a new session bound to key digest ``key`` fits now."""
        if self.draining:
            raise TooManySessions("server is shutting down")
        if len(self.sessions) >= self.max_sessions:
            raise TooManySessions("too many sessions")
        if self.max_per_key is not None and sum(1 for s in self.sessions.values() if s.key == key) >= self.max_per_key:
            raise TooManySessions("too many sessions for this API key")

    def add(self, live: Registered) -> None:
        """Keep ``live`` (call ``admit`` first, in the same step of the event loop)."""
        self.admit(live.key)
        self.sessions[live.token] = live

    def adopt(self, live: Registered) -> None:
        """Keep a session that already exists in the cluster (taken over from a dead replica): it is
        counted, never refused — refusing it would lose it."""
        self.sessions[live.token] = live

    def hold(self, live: Registered) -> None:
        """A socket (here or on another replica) serves ``live`` again: no expiry while it does."""
        timer = self._timers.pop(live.token, None)
        if timer is not None:
            timer.cancel()

    def find(self, token: str, key: str) -> Registered | None:
        """The session for ``token`` if it is alive and bound to the same key digest."""
        live = self.sessions.get(token)
        if live is None or live.closed or not hmac.compare_digest(live.key, key):
            return None
        self.hold(live)
        return live

    def detached(self, live: Registered) -> None:
        """Its socket is gone: keep it for the grace period (0: end it now)."""
        if live.closed:
            self.sessions.pop(live.token, None)
            return
        if self.grace_period_s <= 0 or self.draining:
            self._end(live, "client_disconnected")
            return
        self.hold(live)  # one timer per session: a second one left running would end it while attached again
        self._timers[live.token] = asyncio.get_running_loop().call_later(self.grace_period_s, self._expire, live)

    def _expire(self, live: Registered) -> None:
        self._timers.pop(live.token, None)
        if live.attached is None:
            self._end(live, "session_expired")

    def _end(self, live: Registered, reason: str) -> None:
        live.close(reason)
        self.sessions.pop(live.token, None)
        timer = self._timers.pop(live.token, None)
        if timer is not None:
            timer.cancel()

    def busy(self) -> int:
        return sum(1 for s in self.sessions.values() if s.busy)

    async def drain(
        self, timeout_s: float, flush_s: float = 2.0, hand_off: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Shutdown: refuse new sessions, let running responses finish (bounded), then end all and
        let each attached socket send what its session still holds (bounded by ``flush_s``) before
        uvicorn closes the sockets — or a finished response's ``response.done`` could be lost.
        ``hand_off``: runs before the sessions end here (replicas: they live on in the cluster)."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.busy() and loop.time() < deadline:  # noqa: ASYNC110 (bounded poll of engine-side state)
            await asyncio.sleep(0.05)
        if hand_off is not None:
            await hand_off()
        writers = []
        for live in list(self.sessions.values()):
            writer = live.attached.writer if live.attached is not None else None
            if writer is not None:
                writers.append(writer)
            self._end(live, "server_shutdown")
        if writers:  # each returns once it has sent everything (the session is closed)
            await asyncio.wait(writers, timeout=flush_s)
