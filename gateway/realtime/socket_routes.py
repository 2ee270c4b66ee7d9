"""``/v1/realtime``: the WebSocket upgrade — origin, auth, model, new session or resume — then a ``Connection``."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket

from ..core.ephemeral_keys import VaultUnavailable
from ..core.security import AuthRefused, check_origin
from ..core.services import Services
from ..core.session_registry import StoreUnavailable, TooManySessions
from . import server_events as se
from . import transcription
from .connection import Connection
from .key_binding import PresetRefused, authenticate
from .live_session import LiveSession
from .protocol import CLOSE_NORMAL, CLOSE_POLICY, CLOSE_TRY_AGAIN


class SessionCluster(Protocol):
    """This replica's part of a cluster of replicas sharing sessions (``gateway.cluster.node.ClusterNode``),
    as the upgrade uses it: the app hands it in, so this room never imports the cluster above it."""

    async def admit(self, digest: str, token: str) -> None:
        """A new session of key ``digest``: raises ``StoreUnavailable``, or ``TooManySessions`` over all replicas."""
        ...

    def own(self, live: LiveSession) -> object:
        """Mirror ``live`` to the store from now on."""
        ...

    async def attach(self, token: str, socket_id: str) -> None:
        """Socket ``socket_id`` of this replica holds session ``token`` now (one elsewhere is superseded)."""
        ...

    async def resume(self, s: Services, ws: WebSocket, token: str, key: str, last_seq: int) -> None:
        """Serve a resume of a session this replica does not hold: taken over, or proxied to its owner."""
        ...


async def refuse_store_unavailable(s: Services, ws: WebSocket) -> None:
    """No Redis: a clear error event, then close 1013 (the client retries)."""
    s.metrics.errors.labels(code="store_unavailable").inc()
    await ws.send_json(se.error_event("store_unavailable", "the session store is unavailable; retry shortly"))
    await ws.close(CLOSE_TRY_AGAIN, "session store unavailable")


def routes(
    services: Callable[[], Services],
    node: Callable[[], SessionCluster | None],
    sideband: Callable[[WebSocket], Awaitable[None]] | None = None,
) -> list[BaseRoute]:
    """``services()`` returns the app's ``Services`` once started; ``node()`` this replica's part of a
    cluster sharing sessions through Redis (None: sessions live in this process only); ``sideband``
    serves ``?call_id=…`` (a control socket on a WebRTC call's session, ``gateway.webrtc``)."""

    async def realtime(ws: WebSocket) -> None:
        if sideband is not None and "call_id" in ws.query_params:
            await sideband(ws)
            return
        await _realtime(services(), node(), ws)

    return [WebSocketRoute("/v1/realtime", realtime)]


async def _realtime(s: Services, node: SessionCluster | None, ws: WebSocket) -> None:
    server = s.config.server
    if not check_origin(ws, server):
        await ws.close(CLOSE_POLICY)  # before accept: the client sees HTTP 403
        return
    token = ws.query_params.get("resume_token")
    try:
        key, subprotocol, grant = await authenticate(s, ws, resuming=token is not None)
    except AuthRefused as exc:
        await ws.accept()
        await ws.close(CLOSE_POLICY, str(exc))
        return
    except VaultUnavailable:
        await ws.accept()
        await refuse_store_unavailable(s, ws)
        return
    model = ws.query_params.get("model")
    await ws.accept(subprotocol=subprotocol or None)
    refusal = s.model_refusal(model, also=("embedded",)) if model else None  # "embedded": model.model's default
    if refusal:
        err = se.error_event("model_not_found", refusal)
        await ws.send_json(err)
        await ws.close(CLOSE_POLICY, "model not found")
        return
    intent = ws.query_params.get("intent")
    why = transcription.intent_error(intent) if intent is not None else None
    if why is not None:
        await ws.send_json(se.error_event("invalid_value", why, param="intent"))
        await ws.close(CLOSE_POLICY, "unknown intent")
        return
    if token is not None:
        await _resume(s, node, ws, token, key)
        return
    try:
        s.registry.admit(key)
        token = secrets.token_urlsafe(32)
        if node is not None:  # counted cluster-wide; and no new session without the store
            await node.admit(key, token)
        live = LiveSession(s, key, token=token, grant=grant, transcribe=intent == "transcription", headers=ws.headers)
    except TooManySessions as exc:
        await ws.close(CLOSE_TRY_AGAIN, str(exc))
        return
    except StoreUnavailable:
        await refuse_store_unavailable(s, ws)
        return
    except PresetRefused as exc:
        await ws.close(CLOSE_POLICY, str(exc).encode()[:120].decode(errors="ignore"))
        return
    s.registry.add(live)
    if node is not None:
        node.own(live)
    await Connection(ws, live).run()


async def _resume(s: Services, node: SessionCluster | None, ws: WebSocket, token: str, key: str) -> None:
    try:
        last_seq = int(ws.query_params.get("last_seq", "-1"))
    except ValueError:
        last_seq = -2  # not a number: fails below
    live = s.registry.find(token, key)
    if live is None and node is not None and last_seq >= -1:  # maybe another replica's
        await node.resume(s, ws, token, key, last_seq)
        return
    if node is not None and isinstance(live, LiveSession):
        with contextlib.suppress(StoreUnavailable):  # a socket on another replica is superseded
            await node.attach(token, f"local-{id(ws)}")
    if not isinstance(live, LiveSession) or live.outbox.since(last_seq) is None:
        why = "unknown or expired resume token" if live is None else f"events after seq {last_seq} are gone"
        s.metrics.errors.labels(code="resume_failed").inc()
        await ws.send_json(se.error_event("resume_failed", f"cannot resume: {why}"))
        await ws.close(CLOSE_NORMAL, "resume failed")
        if live is not None and live.attached is None:
            s.registry.detached(live)  # restart its grace timer
        return
    s.metrics.resumes.inc()
    await Connection(ws, live, last_seq).run(resumed=True)
