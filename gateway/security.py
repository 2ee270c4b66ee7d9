"""Origin allowlist and API-key checks (Starlette's CORS middleware does not cover WebSockets)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

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
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
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


def ws_api_key_ok(conn: HTTPConnection, keys: tuple[str, ...]) -> str | Literal[False]:
    """For a WS upgrade: False if refused; else the subprotocol to echo ('' for none).

    Browsers cannot set headers, so a key may come as the subprotocol
    ``openai-insecure-api-key.<key>``; the server then echoes the first offered protocol
    that is *not* the key, or none.
    """
    offered = [p.strip() for p in conn.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    plain = [p for p in offered if not p.startswith(SUBPROTOCOL_KEY_PREFIX)]
    echo = "realtime" if "realtime" in plain else ""
    if not keys:
        return echo
    if key_matches(bearer(conn), keys):
        return echo
    for proto in offered:
        if proto.startswith(SUBPROTOCOL_KEY_PREFIX) and key_matches(proto[len(SUBPROTOCOL_KEY_PREFIX) :], keys):
            return echo
    return False


def subprotocol_key(conn: HTTPConnection) -> str | None:
    """The API key a browser passed as ``openai-insecure-api-key.<key>``."""
    for proto in conn.headers.get("sec-websocket-protocol", "").split(","):
        proto = proto.strip()
        if proto.startswith(SUBPROTOCOL_KEY_PREFIX):
            return proto[len(SUBPROTOCOL_KEY_PREFIX) :]
    return None


def http_api_key_ok(conn: HTTPConnection, keys: tuple[str, ...]) -> bool:
    return not keys or key_matches(bearer(conn), keys)
