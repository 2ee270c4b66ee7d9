"""``/v1/realtime?resume_token=…`` for a session this replica does not hold: found in Redis, it is
proxied from its owner, or taken over if the owner died."""

from __future__ import annotations

import contextlib
import hmac
import logging

from starlette.websockets import WebSocket, WebSocketState

from ..core.services import Services
from ..realtime import server_events as se
from ..realtime.connection import Connection
from ..realtime.live_session import LiveSession
from ..realtime.protocol import CLOSE_NORMAL
from ..realtime.socket_routes import refuse_store_unavailable
from .node import ClusterNode
from .proxy import Proxy
from .store import StoreCorrupt, StoreUnavailable
from .takeover import take_over_session

log = logging.getLogger("stream_omni.cluster")


class ClusterSessions:
    """A ``ClusterNode`` as the Realtime upgrade uses it (``gateway.realtime.socket_routes.SessionCluster``)."""

    def __init__(self, node: ClusterNode):
        self.node = node

    async def admit(self, digest: str, token: str) -> None:
        await self.node.admit(digest, token)

    def own(self, live: LiveSession) -> object:
        return self.node.own(live)

    async def attach(self, token: str, socket_id: str) -> None:
        await self.node.store.attach(token, socket_id)

    async def resume(self, s: Services, ws: WebSocket, token: str, key: str, last_seq: int) -> None:
        await resume_in_cluster(s, self.node, ws, token, key, last_seq)


def cluster_sessions(node: ClusterNode | None) -> ClusterSessions | None:
    return None if node is None else ClusterSessions(node)


async def resume_in_cluster(s: Services, node: ClusterNode, ws: WebSocket, token: str, key: str, last_seq: int) -> None:
    store = node.store
    try:
        record = await store.record(token)
        if record is None or not hmac.compare_digest(record.get("key", ""), key):
            await _failed(s, ws, "unknown or expired resume token")
            return
        holder = await store.holder(token)
        if holder is None or holder == store.replica:  # its owner died (or this replica did, and restarted)
            live = await take_over_session(s, node, token, key)
            if live is not None:
                if live.outbox.since(last_seq) is None:
                    await _failed(s, ws, f"events after seq {last_seq} are gone")
                    s.registry.detached(live)
                    return
                s.metrics.resumes.inc()
                await store.attach(token, f"local-{id(ws)}")
                await Connection(ws, live, last_seq).run(resumed=True)
                return
            holder = await store.holder(token)  # another replica took it first
            if holder is None:
                await _failed(s, ws, "the session could not be recovered")
                return
        got = await store.events_after(token, last_seq)
        snap = await store.snapshot(token)
        if got is None or snap is None:
            await _failed(s, ws, f"events after seq {last_seq} are gone")
            return
        view = {**snap["options"], "id": snap["id"], "object": "realtime.session"}
        s.metrics.resumes.inc()
        await Proxy(s, node, ws, token, key, holder).run(last_seq, got[0], int(snap.get("received", 0)), view)
    except StoreCorrupt as exc:
        await _unreadable(s, ws, token, exc)
    except StoreUnavailable:
        await refuse_store_unavailable(s, ws)
    except Exception as exc:  # a record this replica cannot read: this session's resume fails, nothing else
        await _unreadable(s, ws, token, exc)


async def _unreadable(s: Services, ws: WebSocket, token: str, exc: Exception) -> None:
    """The store held something malformed for this session (a garbage snapshot, event or lease, a
    key of the wrong type): ``resume_failed`` and a clean close, never a dropped socket."""
    log.warning("cannot resume a session from the store: %s", type(exc).__name__)
    if ws.client_state != WebSocketState.CONNECTED:
        return
    with contextlib.suppress(Exception):  # the socket may be gone already: then there is nobody to tell
        await _failed(s, ws, "its stored state is unreadable")


async def _failed(s: Services, ws: WebSocket, why: str) -> None:
    s.metrics.errors.labels(code="resume_failed").inc()
    await ws.send_json(se.error_event("resume_failed", f"cannot resume: {why}"))
    await ws.close(CLOSE_NORMAL, "resume failed")
