"""Origin allowlist and API-key checks (Starlette's CORS middleware does not cover WebSockets)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from .config import ServerConfig

_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}
SUBPROTOCOL_KEY_PREFIX = "openai-insecure-api-key."


def _norm(host: str) -> str:
    host = host.lower().strip("[]")
    return "localhost" if host in {h.strip("[]") for h in _LOOPBACK} else host


def check_origin(conn: HTTPConnection, server: ServerConfig) -> bool:
    """True when the request has no Origin (non-browser) or an allowed one."""
    origin = conn.headers.get("origin")
    if origin is None:
        return True
    if server.allowed_origins:
        return origin in server.allowed_origins  # exact match
    try:
        parts = urlsplit(origin)
        port = parts.port or (443 if parts.scheme == "https" else 80)  # .port raises on "99999" or "x"
    except ValueError:
        return False  # a malformed Origin is a foreign one: 403, not a 500 before authentication
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    bound = conn.scope.get("server") or (server.host, server.port)
    own_ports = {int(bound[1]), server.port} if bound and bound[1] else {server.port}
    own_hosts = {_norm(str(bound[0])) if bound else "", _norm(server.host)}
    return _norm(parts.hostname) in own_hosts and port in own_ports


def key_digest(api_key: str | None) -> str:
    """What a session, resume token or stream is bound to: a hash of the API key that created it."""
    return hashlib.sha256((api_key or "").encode()).hexdigest()


def key_matches(candidate: str | None, keys: tuple[str, ...]) -> bool:
    """Constant-time comparison against every configured key."""
    if not candidate:
        return False
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(candidate.encode(), key.encode())
    return ok


def bearer(conn: HTTPConnection) -> str | None:
    auth = conn.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


@dataclass(frozen=True)
class WsAuth:
    """A WebSocket upgrade that passed authentication."""

    key: str  # digest of the one API key that authenticated: the session is bound to and counted against it
    subprotocol: str  # the subprotocol to echo ('' for none); never the key itself


class AuthRefused(Exception):
    """The upgrade is refused; the message says why (it names no key)."""


def offered_keys(conn: HTTPConnection) -> tuple[set[str], str]:
    """Every key a WS upgrade (or a call offer) offers — its bearer token and its
    ``openai-insecure-api-key.<key>`` subprotocols — and the subprotocol to echo: ``realtime``
    when offered, else none (never the key itself)."""
    offered = [p.strip() for p in conn.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    plain = [p for p in offered if not p.startswith(SUBPROTOCOL_KEY_PREFIX)]
    echo = "realtime" if "realtime" in plain else ""
    given = {p[len(SUBPROTOCOL_KEY_PREFIX) :] for p in offered if p.startswith(SUBPROTOCOL_KEY_PREFIX)}
    token = bearer(conn)
    if token:
        given.add(token)
    return given, echo


def ws_auth(conn: HTTPConnection, keys: tuple[str, ...]) -> WsAuth:
    """Authenticate a WS upgrade by exactly one credential, and bind the session to that one.

    Browsers cannot set headers, so a key may come as the subprotocol
    ``openai-insecure-api-key.<key>`` (``offered_keys``). A bearer token and a subprotocol key that
    differ, or two different subprotocol keys, are refused: otherwise one credential would
    authenticate and another be charged. (An ``ek_`` key is checked by its route, which then binds
    the session to the key that minted it: ``gateway.realtime.socket_routes``.)
    """
    given, echo = offered_keys(conn)
    if not keys:
        return WsAuth(key_digest(None), echo)  # no keys: nothing authenticates, every session is the same tenant
    if len(given) > 1:
        raise AuthRefused("more than one API key offered; send exactly one")
    candidate = next(iter(given), None)
    if not key_matches(candidate, keys):
        raise AuthRefused("invalid or missing API key")
    return WsAuth(key_digest(candidate), echo)


_POLICY_VIOLATION = 1008  # RFC 6455 close code (realtime.protocol.CLOSE_POLICY; protocol stays free of starlette)


async def accept_authorized(ws: WebSocket, server: ServerConfig) -> WsAuth | None:
    """Accept a control socket (a call's sideband) once its Origin and API key pass; None when refused:
    a bad Origin is closed before accept (the client sees HTTP 403), a bad key after it, saying why."""
    if not check_origin(ws, server):
        await ws.close(_POLICY_VIOLATION)
        return None
    try:
        auth = ws_auth(ws, server.api_keys)
    except AuthRefused as exc:
        await ws.accept()
        await ws.close(_POLICY_VIOLATION, str(exc))
        return None
    await ws.accept(subprotocol=auth.subprotocol or None)
    return auth


def http_api_key_ok(conn: HTTPConnection, keys: tuple[str, ...]) -> bool:
    return not keys or key_matches(bearer(conn), keys)


def host_allowed(host_header: str, server: ServerConfig) -> bool:
    """Whether a request's ``Host`` names this server: an IP literal, a loopback name, the bound
    host or one of ``server.allowed_hosts``. A web page that rebinds its own domain to 127.0.0.1
    still sends its domain as Host, so it is refused (the DNS-rebinding attack on local servers)."""
    try:
        name = urlsplit("//" + host_header).hostname  # strips the port and the brackets of [::1]
    except ValueError:
        return False
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
        return True  # a page whose origin is an IP cannot rebind it: its Origin is that IP, not a name
    except ValueError:
        pass
    allowed = {"localhost", _norm(server.host), *(h.lower() for h in server.allowed_hosts)}
    return _norm(name) in allowed


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # change nothing: any page may send them, no harm done


def _refusal(message: str, param: str, code: str) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return JSONResponse(body, status_code=403)


class LocalHostGuard:
    """ASGI middleware for local mode (no API keys): refuse any HTTP request or WebSocket whose
    ``Host`` is not this server's (403), so a web page cannot reach the API through DNS rebinding;
    and any state-changing HTTP request (not GET / HEAD / OPTIONS), of any content type, whose
    ``Origin`` is a foreign one (403): a page may POST a multipart form anywhere without a CORS
    preflight, so the content type alone cannot keep it out. With API keys a page has no key to
    send, and Host and Origin are left to the deployment."""

    def __init__(self, app: ASGIApp, server: ServerConfig):
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.server.api_keys:
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        host = conn.headers.get("host", "")
        if not host_allowed(host, self.server):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
            else:
                await _refusal("this Host is not served here", "Host", "host_not_allowed")(scope, receive, send)
        elif scope["type"] == "http" and scope["method"] not in SAFE_METHODS and not check_origin(conn, self.server):
            await _refusal("requests from this Origin are not allowed", "Origin", "origin_not_allowed")(
                scope, receive, send
            )
        else:
            await self.app(scope, receive, send)
