"""``POST /v1/realtime/client_secrets``: an ``ek_`` key a browser opens one Realtime session with.

OpenAI's GA request (``expires_after {anchor, seconds}``, ``session``) and answer
(``{value, expires_at, session}``). Called with a real API key (the route's guard): an ``ek_`` key
cannot mint another. The session config is checked as a ``session.update`` would be, and the answer's
``session`` is the session object the browser will see in ``session.created``.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.ephemeral_keys import DEFAULT_TTL_S, MAX_TTL_S, MIN_TTL_S, VaultUnavailable, mint
from ..core.security import bearer, key_digest
from ..core.services import Services
from ..realtime import key_binding as keyed
from ..realtime import protocol as p
from .error_bodies import ApiError
from .schemas import parse, read_body


class ExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    anchor: Literal["created_at"] = "created_at"  # the only anchor GA has
    seconds: int = Field(default=DEFAULT_TTL_S, ge=MIN_TTL_S, le=MAX_TTL_S)


class ClientSecretRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expires_after: ExpiresAfter | None = None
    session: p.SessionOptions | None = None  # what a session.update's ``session`` may hold


async def create(svc: Services, request: Request) -> Response:
    req = parse(await read_body(request, svc.config.limits.max_http_body_bytes), ClientSecretRequest)
    # the key digest a WebSocket opened with this key would be bound to (the shared one with no keys)
    parent = key_digest(bearer(request) if svc.config.server.api_keys else None)
    ev = p.SessionUpdate(type="session.update", session=req.session or p.SessionOptions())
    try:
        p.check_sizes(ev, svc.config.limits.max_item_text_chars, svc.config.limits.max_instructions_chars)
    except p.ProtocolError as exc:
        raise ApiError(400, exc.code, exc.message, exc.param) from None
    view, refused = keyed.check(svc, ev)
    if view is None:
        assert refused is not None
        raise ApiError(400, refused["code"], refused["message"], refused["param"])
    ttl = req.expires_after.seconds if req.expires_after is not None else DEFAULT_TTL_S
    fixed = ev.session.model_dump(mode="json", exclude_unset=True)
    value, grant = mint(parent, fixed, ttl, time.time(), session_id=view["id"])
    try:
        kept = await svc.client_secrets.put(value, grant, svc.config.limits.client_secrets_per_key)
    except VaultUnavailable:
        raise ApiError(503, "store_unavailable", "the session store is unavailable; retry shortly") from None
    if not kept:
        limit = svc.config.limits.client_secrets_per_key
        raise ApiError(429, "too_many_client_secrets", f"this API key already has {limit} unused client secrets")
    return JSONResponse({"value": value, "expires_at": int(grant.expires_at), "session": view})
