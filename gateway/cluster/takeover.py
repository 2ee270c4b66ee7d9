"""Continue here a session whose owner replica died (its lease expired): the only I/O around
``snapshot.take_over``."""

from __future__ import annotations

import json
import logging

from ..core.services import Services
from ..realtime.live_session import LiveSession
from .node import ClusterNode
from .snapshot import take_over
from .store import StoreUnavailable

log = logging.getLogger("stream_omni.cluster")


async def take_over_session(s: Services, node: ClusterNode, token: str, key: str) -> LiveSession | None:
    """Take the lease and rebuild the session from Redis: its events (for replay), its snapshot,
    the text it delivered since. A response that was running ends ``incomplete`` (server_error).
    None when another replica won the lease, or Redis no longer holds what the session needs."""
    store = node.store
    if not await store.acquire(token):
        return None
    snap = await store.snapshot(token)
    got = await store.events_after(token, -1) if snap is not None else None
    if snap is None or got is None:
        return None  # expired meanwhile; the lease we took expires too
    entries, top = got
    if not entries or entries[0][0] > snap["seq"] + 1:  # trimmed past the snapshot: text would be lost
        log.warning("cannot take over session %s: its events after the snapshot are gone", snap.get("id"))
        return None
    live = LiveSession(s, key, token=token, replay=(entries, top + 1))
    live.received = int(snap.get("received", 0))
    later = [json.loads(text) for seq, text in entries if seq > snap["seq"]]
    ending = take_over(live.session, snap, later)
    s.registry.adopt(live)
    node.own(live, mirrored=top, fresh=False)
    log.info("took over session %s (%d events, %d closing)", live.session.id, len(entries), len(ending))
    return live


async def safe_take_over(s: Services, node: ClusterNode, token: str, key: str) -> LiveSession | None:
    try:
        return await take_over_session(s, node, token, key)
    except StoreUnavailable:
        return None
