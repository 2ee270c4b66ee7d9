"""ek_ keys shared by replicas: minted on one, taken once on any (Redis ``GETDEL``), as ``SecretVault``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from ..core.ephemeral_keys import Grant, Refusal, VaultUnavailable, value_hash
from .store import RedisStore, StoreUnavailable


class RedisVault:
    """The grants in Redis, keyed by the value's hash (``gateway.cluster.store``: ``ek:`` and ``eks:``).
    A taken grant is deleted in the command that reads it, so two replicas offered the same key at
    the same moment cannot both open a session with it. Reuse and forgery look alike here ("unknown")."""

    def __init__(self, store: RedisStore, clock: Callable[[], float] = time.time):
        self.store = store
        self.clock = clock  # seconds since the epoch: grants carry wall-clock expiry times

    async def put(self, value: str, grant: Grant, max_outstanding: int) -> bool:
        try:
            return await self.store.put_secret(
                value_hash(value), grant.parent, grant.to_json(), int(grant.expires_at * 1000), max_outstanding
            )
        except StoreUnavailable as exc:
            raise VaultUnavailable(str(exc)) from None

    async def take(self, value: str) -> Grant | Refusal:
        h = value_hash(value)
        try:
            raw = await self.store.take_secret(h)
        except StoreUnavailable as exc:
            raise VaultUnavailable(str(exc)) from None
        if raw is None:
            return "unknown"
        grant = Grant.from_json(raw)
        with contextlib.suppress(StoreUnavailable):  # taken already: a stale count expires with the key anyway
            await self.store.forget_secret(h, grant.parent)
        # Redis expires it on its own clock; this replica's clock decides too (they may differ a little)
        return grant if grant.expires_at > self.clock() else "expired"
