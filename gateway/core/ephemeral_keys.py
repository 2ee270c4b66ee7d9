"""Ephemeral ``ek_`` keys (``POST /v1/realtime/client_secrets``): minting, expiry and one-time redemption.

Pure: no asyncio, Starlette or Redis; the clock is passed in. A browser gets an ``ek_`` key from the
app's backend (which holds a real API key) and opens one Realtime session with it: the key is taken
once, before it expires, and the session is bound to (and counted against) the key that minted it,
with the session config fixed at minting. Only a hash of the value is kept, so a copy of the store
(memory or Redis) holds nothing a client could connect with.

The MCP ``headers`` and ``authorization`` a minting request gives its tools are not kept as they are
either: each tool's are sealed (AES-GCM) under a key derived from the ``ek_`` value itself (``seal``), so
the store holds ciphertext that only the holder of the ``ek_`` key can open, once, when it redeems it
(``unseal``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

PREFIX = "ek_"
DEFAULT_TTL_S = 600  # GA's default when expires_after is left out
MIN_TTL_S = 10  # GA's bounds on expires_after.seconds
MAX_TTL_S = 7200

Refusal = Literal["unknown", "expired", "used"]


def is_ephemeral(credential: str | None) -> bool:
    return credential is not None and credential.startswith(PREFIX)


def value_hash(value: str) -> str:
    """What the store keys a secret by (never the value itself)."""
    return hashlib.sha256(value.encode()).hexdigest()


SEALED = "sealed"  # an mcp tool's headers and authorization, sealed under the ek_ value (seal / unseal)
_SECRET_FIELDS = ("headers", "authorization")


def _seal_key(value: str) -> bytes:
    """The AES-256 key of a grant's secrets: from the ek_ value (256 random bits), not its store hash."""
    return hashlib.sha256(b"stream-omni ek_ sealed mcp secrets\x00" + value.encode()).digest()


def seal(session: dict[str, Any], value: str) -> dict[str, Any]:
    """``session`` with each mcp tool's ``headers`` / ``authorization`` replaced by ``sealed``: nonce and
    AES-GCM ciphertext (its label as associated data), base64."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    tools = session.get("tools")
    if not isinstance(tools, list):
        return session
    out = []
    for t in tools:
        secret = {k: t[k] for k in _SECRET_FIELDS if isinstance(t, dict) and t.get(k) is not None}
        if secret:
            nonce = os.urandom(12)
            label = str(t.get("server_label", "")).encode()
            box = AESGCM(_seal_key(value)).encrypt(nonce, json.dumps(secret).encode(), label)
            t = {k: v for k, v in t.items() if k not in _SECRET_FIELDS}
            t[SEALED] = base64.b64encode(nonce + box).decode("ascii")
        out.append(t)
    return {**session, "tools": out}


def unseal(session: dict[str, Any], value: str) -> dict[str, Any]:
    """``session`` with its sealed secrets opened by the ek_ ``value``; a seal that does not open (another
    value, a tampered store) leaves that tool without secrets (its server then refuses the calls)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    tools = session.get("tools")
    if not isinstance(tools, list):
        return session
    out = []
    for t in tools:
        if isinstance(t, dict) and SEALED in t:
            t = dict(t)
            sealed = t.pop(SEALED)
            try:
                raw = base64.b64decode(str(sealed), validate=True)
                label = str(t.get("server_label", "")).encode()
                t.update(json.loads(AESGCM(_seal_key(value)).decrypt(raw[:12], raw[12:], label)))
            except (InvalidTag, ValueError, binascii.Error):
                pass
        out.append(t)
    return {**session, "tools": out}


@dataclass(frozen=True)
class Grant:
    """What an ``ek_`` key stands for."""

    parent: str  # digest of the API key that minted it (gateway.core.security.key_digest): limits and ownership
    expires_at: float  # seconds since the epoch; not accepted from then on
    session: dict[str, Any]  # the session.update ``session`` object fixed at minting (the fields it set)
    session_id: str = ""  # the id the minting answer gave the session ("": a new one)

    def to_json(self) -> str:
        raw = {"parent": self.parent, "expires_at": self.expires_at, "session": self.session, "id": self.session_id}
        return json.dumps(raw, separators=(",", ":"))

    @staticmethod
    def from_json(text: str | bytes) -> Grant:
        raw = json.loads(text)
        return Grant(str(raw["parent"]), float(raw["expires_at"]), dict(raw["session"]), str(raw.get("id", "")))


def mint(
    parent: str,
    session: dict[str, Any],
    ttl_s: int,
    now: float,
    session_id: str = "",
    token: Callable[[], str] | None = None,
) -> tuple[str, Grant]:
    """A new key's value and its grant, valid ``ttl_s`` seconds from ``now`` (within GA's bounds)."""
    if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
        raise ValueError(f"ttl_s must be within [{MIN_TTL_S}, {MAX_TTL_S}], not {ttl_s}")
    value = PREFIX + (token or (lambda: secrets.token_urlsafe(32)))()
    return value, Grant(parent, now + ttl_s, seal(session, value), session_id)


class VaultUnavailable(Exception):
    """The store holding the grants (Redis) did not answer: try again shortly."""


class SecretVault(Protocol):
    """Where unredeemed grants wait: this process (``MemoryVault``) or Redis (``gateway.cluster.secrets``).
    Either method raises ``VaultUnavailable`` when its store does not answer."""

    async def put(self, value: str, grant: Grant, max_outstanding: int) -> bool:
        """Keep ``grant`` under ``value``; False when its parent already has ``max_outstanding`` waiting."""
        ...

    async def take(self, value: str) -> Grant | Refusal:
        """The grant, removed so that no second session (here or on any replica) gets it; or why not."""
        ...


class MemoryVault:
    """Grants of this process, by value hash. Taken ones are remembered until they would have expired,
    so a reuse is told apart from a forgery (in logs and tests: the client hears the same refusal)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock  # seconds since the epoch (time.time in the server)
        self._waiting: dict[str, Grant] = {}
        self._taken: dict[str, float] = {}  # hash → when it would have expired

    def _prune(self, now: float) -> None:
        for h in [h for h, g in self._waiting.items() if g.expires_at <= now]:
            del self._waiting[h]
        for h in [h for h, t in self._taken.items() if t <= now]:
            del self._taken[h]

    def outstanding(self, parent: str) -> int:
        self._prune(self.clock())
        return sum(1 for g in self._waiting.values() if g.parent == parent)

    def put_now(self, value: str, grant: Grant, max_outstanding: int) -> bool:
        if self.outstanding(grant.parent) >= max_outstanding:
            return False
        self._waiting[value_hash(value)] = grant
        return True

    def take_now(self, value: str) -> Grant | Refusal:
        now = self.clock()
        h = value_hash(value)
        grant = self._waiting.pop(h, None)
        if grant is not None and grant.expires_at > now:
            self._taken[h] = grant.expires_at
            return grant
        if grant is not None:
            return "expired"
        self._prune(now)
        return "used" if h in self._taken else "unknown"

    async def put(self, value: str, grant: Grant, max_outstanding: int) -> bool:
        return self.put_now(value, grant, max_outstanding)

    async def take(self, value: str) -> Grant | Refusal:
        return self.take_now(value)
