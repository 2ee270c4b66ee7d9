"""A session bound to its API key: the key's budgets, and the config an ``ek_`` key fixed.

``check`` validates a ``POST /v1/realtime/client_secrets`` session config exactly as a
``session.update`` would be (the same Session and audio checks, on a throwaway session) and gives
the session object to answer with; ``bind`` applies it to the real session before
``session.created``, so the browser's first view is the fixed config (``gateway.realtime.fixed_fields``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from starlette.requests import HTTPConnection

from ..core.ephemeral_keys import Grant as Grant  # re-exported: LiveSession takes one
from ..core.ephemeral_keys import is_ephemeral, unseal
from ..core.keylimits import BoundLimits
from ..core.security import AuthRefused, offered_keys, ws_auth
from ..core.services import Services
from . import protocol as p
from .actions import Output
from .defaults import session_defaults
from .inputs import Preset
from .media import MediaInput
from .session import Session

log = logging.getLogger("stream_omni.realtime")


class PresetRefused(Exception):
    """The config an ``ek_`` key carries is not valid on this server (its config changed since minting)."""


def update_of(session: dict[str, Any]) -> p.SessionUpdate:
    """The ``session.update`` a key's session config amounts to (raises pydantic's ValidationError)."""
    return p.SessionUpdate(type="session.update", session=p.SessionOptions.model_validate(session))


def _apply(
    session: Session, media: MediaInput, ev: p.SessionUpdate | None, limiter: BoundLimits | None = None, sid: str = ""
) -> Output | None:
    """``ev`` applied and fixed on a session not yet opened (the voice layer checks its audio first), with
    the key's budgets and the grant's session id; the error refusing it, or None."""
    refused = media.check_update(ev) if ev is not None else None
    if refused is not None:
        return refused
    out = session.handle(Preset(limiter, sid or None, ev))
    return out if out.events else None


def check(svc: Services, ev: p.SessionUpdate) -> tuple[dict[str, Any], None] | tuple[None, dict[str, Any]]:
    """(the session object a session opened with this config starts with, None), or (None, the GA error)."""
    session = Session(session_defaults(svc), lambda e: e)
    media = MediaInput(session, svc, lambda _out: None)
    refused = _apply(session, media, ev)
    if refused is not None:
        return None, refused.events[0]["error"]
    return session.session_view(), None


def bind(svc: Services, key: str, session: Session, media: MediaInput, grant: Grant | None) -> None:
    """Before ``session.created``: the budgets of key digest ``key``, and ``grant``'s config, fixed."""
    limiter = svc.key_limits.bound(key) if svc.key_limits is not None and svc.key_limits.enabled else None
    ev = None
    if grant is not None:
        try:
            ev = update_of(grant.session)
        except ValueError as exc:
            raise PresetRefused(f"the key's session config is not valid here: {exc}") from None
    refused = _apply(session, media, ev, limiter, grant.session_id if grant is not None else "")
    if refused is not None:
        raise PresetRefused(f"the key's session config is not valid here: {refused.events[0]['error']['message']}")


async def authenticate(s: Services, conn: HTTPConnection, resuming: bool) -> tuple[str, str, Grant | None]:
    """A WebSocket upgrade's or a call offer's credential: (the key digest the session is bound to, the
    subprotocol to echo, the ek_ key's grant if one was offered). An ``ek_`` key is taken here, once: it
    opens one new session, bound to the key that minted it; an expired, used or unknown one is refused
    like a wrong key. Raises ``AuthRefused``, or ``VaultUnavailable`` (Redis did not answer)."""
    given, echo = offered_keys(conn)
    ephemeral = [k for k in given if is_ephemeral(k)]
    if not ephemeral:
        return ws_auth(conn, s.config.server.api_keys).key, echo, None
    if len(given) > 1:
        raise AuthRefused("more than one API key offered; send exactly one")
    if resuming:  # taking it would spend it on nothing
        raise AuthRefused("an ek_ key opens one new session; it cannot resume one")
    grant = await s.client_secrets.take(ephemeral[0])
    if isinstance(grant, str):
        log.info("ek_ key refused: %s", grant)
        s.metrics.errors.labels(code="invalid_client_secret").inc()
        raise AuthRefused("invalid, expired or already used client secret")
    grant = dataclasses.replace(grant, session=unseal(grant.session, ephemeral[0]))  # its MCP secrets opened
    return grant.parent, echo, grant
