"""The owner's copy of one session in Redis: its events (in order, before a socket sends them) and
its snapshot, so any replica can resume it — or take it over if this one dies.

One task per owned session. Each flush writes every event stamped since the last one, and a
snapshot when something other than text went out, in one transaction; only then may a socket send
them (``deliverable``), so no client ever holds an event Redis lacks. While Redis is unavailable
the session's own socket keeps streaming (``holding`` is False) and the mirror retries; once
Redis answers again it rewrites the session from scratch (a restarted Redis lost it all).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .snapshot import event_type, needs_snapshot, snapshot
from .store import RedisStore, StoreUnavailable

if TYPE_CHECKING:
    from ..realtime.live_session import LiveSession

log = logging.getLogger("stream_omni.cluster")

RETRY_S = 0.25  # between attempts while Redis is unavailable


class Mirror:
    def __init__(self, store: RedisStore, live: LiveSession, mirrored: int = -1, fresh: bool = True):
        """``mirrored``: the last seq already in Redis (a taken-over session's stream has its past)."""
        self.store = store
        self.live = live
        self.mirrored = mirrored  # the last seq Redis holds
        self.fresh = fresh  # the next flush (re)writes the record, lease and stream from scratch
        self.holding = True  # sockets wait for the mirror (False while Redis is unavailable)
        self.ended = False  # the session closed and its end is recorded
        self.handed_off = False  # this replica is shutting down: the session lives on in the cluster
        self._wake = asyncio.Event()
        self._wake.set()
        self.task = asyncio.create_task(self._run(), name="session-mirror")

    @property
    def grace_s(self) -> float:
        return self.live.svc.config.server.grace_period_s

    def wake(self) -> None:
        self._wake.set()

    def lost(self) -> None:
        """Redis lost the session (it restarted): rewrite it all at the next flush."""
        if self.handed_off:
            return  # this replica is leaving: the session is the cluster's now
        self.fresh = True
        self.wake()

    async def _run(self) -> None:
        live = self.live
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._flush()
                if not self.holding:
                    log.info("session %s mirrored again", live.session.id)
                self.holding = True
            except StoreUnavailable as exc:
                if self.holding:
                    log.warning("session %s not mirrored (%s): its socket streams on", live.session.id, exc)
                self.holding = False
                self.fresh = True  # what Redis holds is unknown now: rewrite it all
                live.changed.set()  # sockets stop waiting for the mirror
                await asyncio.sleep(RETRY_S)
                self._wake.set()
                continue
            live.changed.set()
            if live.closed and self.mirrored >= live.outbox.next_seq - 1:
                await self._end()
                return

    async def _flush(self) -> None:
        live = self.live
        top = live.outbox.next_seq - 1
        if top <= self.mirrored and not self.fresh:
            return
        since = None if self.fresh else live.outbox.since(self.mirrored)
        if since is None:  # fresh, or the buffer dropped events Redis never got: all it holds, from scratch
            since = live.outbox.since(live.outbox.first_seq - 1) or []
            self.fresh = True
        types = [event_type(text) for seq, text in since if seq > self.mirrored or self.fresh]
        snap = snapshot(live.session, top, live.received) if self.fresh or needs_snapshot(types) else None
        await self.store.publish(
            live.token, live.key, self.grace_s, since, snap, live.limits.replay_max_events, fresh=self.fresh
        )
        self.fresh = False
        self.mirrored = top

    async def hand_off(self) -> None:
        """Shutdown: everything stamped reaches Redis, then the lease goes, so the next replica the
        client resumes on takes the session over at once (no lease to wait out)."""
        self.handed_off = True
        try:
            await self._flush()
            await self.store.release(self.live.token)
        except StoreUnavailable:
            pass  # its lease expires on its own

    async def _end(self) -> None:
        if self.handed_off:
            self.ended = True
            return
        try:
            await self.store.end(self.live.token, self.live.key)
        except StoreUnavailable:
            pass  # its keys expire on their own (grace period + lease)
        self.ended = True

    def cancel(self) -> None:
        self.task.cancel()
