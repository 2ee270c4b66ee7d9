"""This replica's part in a cluster of gateways sharing sessions through Redis.

Three loops: the heartbeat (renews the lease of every session this replica owns; a session Redis
lost is rewritten, one another replica took is closed here; a socket proxied from another
replica that went silent counts as detached), the command reader (client frames that sockets on
other replicas forward to the sessions owned here), and the per-key message counter (frames
summed over replicas in one-second windows).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from ..realtime.protocol import CLOSE_SUPERSEDED
from .mirror import Mirror
from .secrets import RedisVault
from .store import RedisStore, StoreUnavailable

if TYPE_CHECKING:
    from ..core.config import Config
    from ..core.services import Services
    from ..core.session_registry import SessionRegistry
    from ..realtime.live_session import LiveSession

log = logging.getLogger("stream_omni.cluster")


class RemoteSocket:
    """Stands in ``LiveSession.attached`` for a socket on another replica (``gateway.cluster.proxy``).

    That replica sends the session's events from Redis; here it only keeps the session from
    expiring. Superseding it needs no call: the newer socket's id in Redis ends it there."""

    writer = None

    def __init__(self, socket_id: str):
        self.socket_id = socket_id

    def kick(self, code: int, reason: str) -> None:
        pass


class ClusterNode:
    def __init__(self, store: RedisStore, registry: SessionRegistry, key_messages_per_s: float | None):
        self.store = store
        self.registry = registry
        self.key_messages_per_s = key_messages_per_s  # frames per second per API key, all replicas (None: no cap)
        self.mirrors: dict[str, Mirror] = {}  # token → the mirror of a session this replica owns
        self._frames: dict[str, int] = {}  # key digest → frames counted here, not yet added in Redis
        self._limited: set[str] = set()  # key digests over their rate in the current window
        self._window = 0
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def period_s(self) -> float:
        return self.store.lease_ms / 3000

    async def start(self) -> None:
        await self.store.ping()  # /ready says what it found
        self._tasks = [
            asyncio.create_task(self._heartbeat(), name="cluster-heartbeat"),
            asyncio.create_task(self._commands(), name="cluster-commands"),
            asyncio.create_task(self._rates(), name="cluster-rates"),
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        mirrors = list(self.mirrors.values())
        if mirrors:  # drained sessions' last events (and ends) reach Redis first, bounded
            await asyncio.wait([m.task for m in mirrors], timeout=2.0)
        for m in mirrors:
            m.cancel()
        for t in self._tasks:
            with contextlib.suppress(BaseException):
                await t
        await self.store.close()

    # ------------------------------------------------------------------ sessions owned here

    async def admit(self, digest: str, token: str) -> None:
        """A new session: raises ``StoreUnavailable`` without Redis, ``TooManySessions`` when key
        ``digest`` has ``max_per_key`` sessions on all replicas together."""
        from ..core.session_registry import TooManySessions

        limit = self.registry.max_per_key
        if limit is None:
            if not await self.store.ping():
                raise StoreUnavailable("no answer")
            return
        if not await self.store.admit(digest, token, limit, self.registry.grace_period_s):
            raise TooManySessions("too many sessions for this API key")

    def own(self, live: LiveSession, mirrored: int = -1, fresh: bool = True) -> Mirror:
        mirror = Mirror(self.store, live, mirrored, fresh)
        live.mirror = mirror
        self.mirrors[live.token] = mirror
        mirror.task.add_done_callback(lambda _t: self._forget(live.token, mirror))
        return mirror

    def _forget(self, token: str, mirror: Mirror) -> None:
        if self.mirrors.get(token) is mirror:
            del self.mirrors[token]

    async def hand_off(self) -> None:
        """Shutdown (after running responses finished): every session owned here goes to the cluster
        whole — its events and snapshot written, its lease released — instead of ending with this
        process; its clients get close 1012 and resume on another replica."""
        # the heartbeat first: a renewal in flight would set a released lease again (it re-takes a
        # lease it finds gone), and the next replica would wait that lease out
        for t in self._tasks:
            if t.get_name() == "cluster-heartbeat":
                t.cancel()
                with contextlib.suppress(BaseException):
                    await t
        await asyncio.gather(*(m.hand_off() for m in list(self.mirrors.values()) if not m.live.closed))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            owned = {
                t: (m.live.key, m.live.svc.config.server.grace_period_s)
                for t, m in self.mirrors.items()
                if not m.live.closed and not m.handed_off
            }
            try:
                if not owned:
                    await self.store.ping()
                    continue
                renewed = await self.store.renew(owned)
                for token, state in renewed.items():
                    mirror = self.mirrors.get(token)
                    if mirror is None:
                        continue
                    if state == 2:  # Redis lost it (restarted): write it again
                        mirror.lost()
                    elif state == 0:  # another replica decided this one was dead and took it over
                        log.warning("session %s was taken over by another replica", mirror.live.session.id)
                        mirror.live.close("session_moved")
                    await self._check_remote(mirror.live)
            except StoreUnavailable:
                continue  # /ready is false; the mirrors retry on their own

    async def _check_remote(self, live: LiveSession) -> None:
        """A socket on another replica that stopped refreshing its id (that replica died) is gone."""
        att = live.attached
        if not isinstance(att, RemoteSocket) or await self.store.attached(live.token) == att.socket_id:
            return
        if live.attached is att:  # unless another socket attached during the await
            live.attached = None
            self.registry.detached(live)

    # ------------------------------------------------------------------ frames from other replicas

    async def _commands(self) -> None:
        last: str | None = None
        while True:
            try:
                last = last or await self.store.now_id()  # a replica id is new: nothing older is for it
                rows = await self.store.commands(last, int(self.period_s * 1000))
            except StoreUnavailable:
                await asyncio.sleep(0.25)
                continue
            for entry, token, kind, data in rows:
                last = entry
                mirror = self.mirrors.get(token)
                if mirror is None or mirror.live.closed:
                    continue  # the session ended here (or moved): the socket there learns it from the stream
                try:
                    self.apply(mirror.live, kind, data)
                    if kind == "attach":  # the socket there says session.resumed with this count
                        await self.store.ack(data.decode(), mirror.live.received)
                except StoreUnavailable:
                    pass  # that socket falls back to the snapshot's count
                except Exception:  # one bad command must not stop the reader
                    log.exception("applying a forwarded client frame failed")

    def apply(self, live: LiveSession, kind: str, data: bytes) -> None:
        if kind == "attach":
            previous = live.attached
            live.attached = RemoteSocket(data.decode())
            if previous is not None and not isinstance(previous, RemoteSocket):
                previous.kick(CLOSE_SUPERSEDED, "session resumed on another connection")
            self.registry.hold(live)
        elif kind == "detach":
            att = live.attached
            if isinstance(att, RemoteSocket) and att.socket_id == data.decode():
                live.attached = None
                self.registry.detached(live)
        elif kind == "text":
            live.on_text(data.decode())
            live.received += 1
        elif kind == "bytes":
            live.on_bytes(data)
            live.received += 1
        elif kind == "limited":  # refused by the socket's replica, and told so here (not to be resent)
            live.frame_refused(tell=True)

    # ------------------------------------------------------------------ message rate per key

    def over_rate(self, digest: str) -> bool:
        """Count one client frame of key ``digest``; True if the key is over its cluster-wide rate."""
        if self.key_messages_per_s is None:
            return False
        self._frames[digest] = self._frames.get(digest, 0) + 1
        return digest in self._limited

    async def _rates(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            window = int(time.time())
            if window != self._window:
                self._window, self._limited = window, set()
            if not self._frames or self.key_messages_per_s is None:
                continue
            counts, self._frames = self._frames, {}
            try:
                totals = await self.store.count_frames(counts, window)
            except StoreUnavailable:
                continue  # each socket's own token bucket still applies
            self._limited |= {d for d, n in totals.items() if n > self.key_messages_per_s}


async def start_node(config: Config, services: Services) -> ClusterNode:
    """This replica's node for ``replicas.store`` (a Redis URL); it counts per-key frames when keys are on."""
    c = config.replicas
    per_key = config.limits.messages_per_s_per_key if config.server.api_keys else None
    node = ClusterNode(RedisStore(c.store, c.lease_s, c.key_prefix), services.registry, per_key)
    await node.start()
    services.key_rate = node
    services.client_secrets = RedisVault(node.store)  # an ek_ key minted on one replica opens a session on any
    return node
