"""The Redis side of sessions shared by gateway replicas (config ``replicas.store: redis://…``).

Thin I/O over redis-py's asyncio client; what each key means is here and nowhere else.

- ``s:{token}``     hash: ``key`` (the API key digest the session is bound to), ``grace``
- ``e:{token}``     stream: the session's events; entry id ``{seq + 1}-0``, field ``e`` = the JSON
                   text the client receives; trimmed to ``replay_max_events`` (exact MAXLEN)
- ``snap:{token}``  the snapshot written with the events (``gateway.cluster.snapshot``)
- ``lease:{token}`` the replica running the session, with a TTL the owner keeps renewing
- ``att:{token}``   the id of the newest socket attached to it, on any replica (the newer one wins)
- ``cmd:{replica}`` stream: client frames and attach/detach notes for the sessions a replica owns
- ``k:{digest}``    sorted set of a key's live sessions (score: when its record expires, ms)
- ``rate:{digest}:{window}`` client frames of a key in one second, summed over replicas
- ``ek:{hash}``     an unredeemed ek_ key's grant (JSON), by the SHA-256 of its value; expires with the key
- ``eks:{digest}``  sorted set of a key's unredeemed ek_ keys (score: when each expires, ms)

Every session key expires (grace period + lease) unless its owner renews it, so a replica that
dies leaves nothing behind for long. Calls fail fast (no retries, short timeouts): the caller
decides what an unavailable store means (``StoreUnavailable``).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError
from redis.retry import Retry

from ..core.session_registry import StoreUnavailable

__all__ = ["RedisStore", "StoreCorrupt", "StoreUnavailable"]

Entries = list[tuple[int, str]]  # (seq, JSON text), seq ascending


class StoreCorrupt(StoreUnavailable):
    """Redis answered, but refused a command on what a key holds (a key of another type): one
    session's records are unusable, the store is not down. A ``StoreUnavailable`` to every caller
    that only knows that one, so no loop dies of it."""


# admit: drop expired members, refuse past the limit, else add. KEYS[1]=k:{digest};
# ARGV: now_ms, expires_ms, limit, token → 1 admitted, 0 refused
_ADMIT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[4]) == false and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
"""
# renew the lease if it is ours or gone. KEYS[1]=lease; ARGV: replica, ttl_ms → 1 renewed, 2 was
# gone (Redis lost it: the owner rewrites the session), 0 someone else holds it
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if holder == false then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
return 0
"""

# keep an ek_ key's grant unless its parent key already has `limit` waiting. KEYS[1]=ek:{hash},
# KEYS[2]=eks:{digest}; ARGV: now_ms, expires_at_ms, limit, grant JSON, hash → 1 kept, 0 refused
_PUT_SECRET = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[5])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) - tonumber(ARGV[1]) then
  redis.call('PEXPIREAT', KEYS[2], ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[4], 'PXAT', ARGV[2])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def entry_id(seq: int) -> str:
    return f"{seq + 1}-0"


def entry_seq(entry_id: bytes | str) -> int:
    raw = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(raw.split("-", 1)[0]) - 1


class RedisStore:
    def __init__(self, url: str, lease_s: float = 3.0, prefix: str = "so:"):
        self.url = url
        self.lease_ms = int(lease_s * 1000)  # an owner silent this long has lost its sessions
        self.prefix = prefix
        self.replica = secrets.token_hex(8)  # this process
        # fail fast, no retries: the caller decides what an unavailable store means
        self.r = aioredis.Redis.from_url(
            url, socket_connect_timeout=1.0, socket_timeout=2.0, retry=Retry(NoBackoff(), 0)
        )
        # blocking reads hold their connection for up to a lease: their own pool, a longer timeout
        self.blocking = aioredis.Redis.from_url(
            url, socket_connect_timeout=1.0, socket_timeout=lease_s + 2.0, retry=Retry(NoBackoff(), 0)
        )
        self.available = False  # the last call (or health check) reached Redis
        self._admit = self.r.register_script(_ADMIT)
        self._renew = self.r.register_script(_RENEW)
        self._release = self.r.register_script(_RELEASE)
        self._put_secret = self.r.register_script(_PUT_SECRET)

    def k(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{name}"

    async def call(self, coro: Any) -> Any:
        """Await one Redis call; a failure marks the store unavailable and raises ``StoreUnavailable``."""
        try:
            out = await coro
        except ResponseError as exc:  # e.g. WRONGTYPE: the server is fine, the key is not
            self.available = True
            raise StoreCorrupt(str(exc)[:200] or type(exc).__name__) from None
        except (RedisError, OSError) as exc:
            self.available = False
            raise StoreUnavailable(str(exc) or type(exc).__name__) from None
        self.available = True
        return out

    async def ping(self) -> bool:
        try:
            await self.call(self.r.ping())
        except StoreUnavailable:
            return False
        return True

    async def close(self) -> None:
        await self.r.aclose()
        await self.blocking.aclose()

    # ------------------------------------------------------------------ records and admission

    def ttl_ms(self, grace_s: float) -> int:
        return int(grace_s * 1000) + self.lease_ms

    async def admit(self, digest: str, token: str, limit: int, grace_s: float) -> bool:
        """Count ``token`` among ``digest``'s sessions unless the key already has ``limit`` (cluster-wide)."""
        now = int(time.time() * 1000)
        keys = [self.k("k", digest)]
        return bool(await self.call(self._admit(keys=keys, args=[now, now + self.ttl_ms(grace_s), limit, token])))

    async def record(self, token: str) -> dict[str, str] | None:
        """The session's record (``key``: digest, ``grace``), or None when there is none."""
        raw = await self.call(self.r.hgetall(self.k("s", token)))
        return {a.decode(): b.decode() for a, b in raw.items()} if raw else None

    async def publish(
        self,
        token: str,
        digest: str,
        grace_s: float,
        entries: Entries,
        snap: dict[str, Any] | None,
        max_events: int,
        fresh: bool = False,
    ) -> None:
        """Append ``entries`` to the session's stream and write ``snap`` (if any), in one transaction;
        ``fresh``: (re)write everything — a new session, or one Redis lost (restart) — from scratch."""
        ttl = self.ttl_ms(grace_s)
        pipe = self.r.pipeline(transaction=True)
        stream, snap_key, rec = self.k("e", token), self.k("snap", token), self.k("s", token)
        if fresh:
            pipe.delete(stream)
            pipe.hset(rec, mapping={"key": digest, "grace": str(grace_s)})
            pipe.set(self.k("lease", token), self.replica, px=self.lease_ms)
            now = int(time.time() * 1000)
            pipe.zadd(self.k("k", digest), {token: now + ttl})
        for seq, text in entries:
            pipe.xadd(stream, {"e": text}, id=entry_id(seq), maxlen=max_events, approximate=False)
        if snap is not None:
            pipe.set(snap_key, json.dumps(snap, separators=(",", ":")), px=ttl)
        for key in (stream, rec):
            pipe.pexpire(key, ttl)
        await self.call(pipe.execute())

    async def renew(self, owned: dict[str, tuple[str, float]]) -> dict[str, int]:
        """Heartbeat for the sessions this replica owns (token → (digest, grace)): their lease and TTLs.
        Returns token → 1 (renewed), 2 (Redis had lost it: rewrite it) or 0 (another replica owns it)."""
        pipe = self.r.pipeline(transaction=False)
        now = int(time.time() * 1000)
        for token, (digest, grace) in owned.items():
            ttl = self.ttl_ms(grace)
            await self._renew(keys=[self.k("lease", token)], args=[self.replica, self.lease_ms], client=pipe)
            for kind in ("s", "e", "snap"):
                pipe.pexpire(self.k(kind, token), ttl)
            pipe.zadd(self.k("k", digest), {token: now + ttl}, xx=True)
        out = await self.call(pipe.execute())
        return {token: int(out[i * 5]) for i, token in enumerate(owned)}

    async def end(self, token: str, digest: str, linger_s: float = 10.0) -> None:
        """The session ended: it no longer counts for its key; its events linger briefly (a socket
        tailing them on another replica reads the last ones), then everything goes."""
        pipe = self.r.pipeline(transaction=True)
        pipe.zrem(self.k("k", digest), token)
        pipe.delete(self.k("lease", token), self.k("snap", token), self.k("s", token))
        pipe.pexpire(self.k("e", token), int(linger_s * 1000))
        await self.call(pipe.execute())

    # ------------------------------------------------------------------ ownership

    async def holder(self, token: str) -> str | None:
        raw = await self.call(self.r.get(self.k("lease", token)))
        return raw.decode() if raw else None

    async def acquire(self, token: str) -> bool:
        """Take the session's lease if nobody holds it (its owner died): only one replica wins."""
        return bool(await self.call(self.r.set(self.k("lease", token), self.replica, px=self.lease_ms, nx=True)))

    async def release(self, token: str) -> None:
        """Give up the session's lease (only if it is this replica's)."""
        await self.call(self._release(keys=[self.k("lease", token)], args=[self.replica]))

    async def snapshot(self, token: str) -> dict[str, Any] | None:
        raw = await self.call(self.r.get(self.k("snap", token)))
        return json.loads(raw) if raw else None

    async def attach(self, token: str, socket_id: str) -> None:
        """Socket ``socket_id`` is now the session's (any socket on any replica before it is superseded)."""
        await self.call(self.r.set(self.k("att", token), socket_id, px=self.lease_ms))

    async def attached(self, token: str) -> str | None:
        raw = await self.call(self.r.get(self.k("att", token)))
        return raw.decode() if raw else None

    async def still_attached(self, token: str, socket_id: str) -> str:
        """Is ``socket_id`` still the newest socket? "yes" (its TTL refreshed), "superseded", or
        "reclaimed": its id had expired (a slow moment, a restarted Redis) and no other socket
        wrote one, so it is the newest again — the owner may have counted it gone: tell it again."""
        key = self.k("att", token)
        reclaimed = await self.call(self.r.set(key, socket_id, px=self.lease_ms, nx=True))
        if await self.attached(token) != socket_id:
            return "superseded"
        if reclaimed:
            return "reclaimed"
        await self.call(self.r.pexpire(key, self.lease_ms))
        return "yes"

    # ------------------------------------------------------------------ events

    async def events_after(self, token: str, last_seq: int) -> tuple[Entries, int] | None:
        """Every event with seq > ``last_seq`` and the stream's last seq; None when the stream no
        longer holds ``last_seq + 1`` (trimmed, or gone) though the session sent it."""
        stream = self.k("e", token)
        pipe = self.r.pipeline(transaction=True)
        pipe.xrange(stream, min=entry_id(last_seq + 1), max="+")
        pipe.xrevrange(stream, count=1)
        pipe.xrange(stream, count=1)
        after, last, first = await self.call(pipe.execute())
        if not last:
            return None
        top = entry_seq(last[0][0])
        low = entry_seq(first[0][0])
        if last_seq > top or last_seq + 1 < low:
            return None
        return [(entry_seq(i), f[b"e"].decode()) for i, f in after], top

    async def tail(self, token: str, after_seq: int, block_ms: int) -> Entries:
        """Events after ``after_seq``, waiting up to ``block_ms`` for the first one."""
        got = await self.call(self.blocking.xread({self.k("e", token): entry_id(after_seq)}, block=block_ms))
        return [(entry_seq(i), f[b"e"].decode()) for _, rows in got for i, f in rows]

    # ------------------------------------------------------------------ commands to an owner

    async def command(self, replica: str, token: str, kind: str, data: str | bytes = "") -> None:
        """To the replica owning ``token``: a client frame (``text``/``bytes``) or ``attach``/``detach``."""
        fields: dict[str, str | bytes] = {"t": token, "k": kind, "d": data}
        await self.call(self.r.xadd(self.k("cmd", replica), fields, maxlen=100_000, approximate=True))

    async def now_id(self) -> str:
        """A stream id for "now" on Redis's clock: read commands after it (not "$", which each call
        takes afresh, so an entry added between two reads would be skipped)."""
        sec, usec = await self.call(self.r.time())
        return f"{int(sec) * 1000 + int(usec) // 1000}-0"

    async def commands(self, last_id: str, block_ms: int) -> list[tuple[str, str, str, bytes]]:
        """This replica's commands after ``last_id``: (entry id, token, kind, data)."""
        got = await self.call(self.blocking.xread({self.k("cmd", self.replica): last_id}, block=block_ms))
        return [(i.decode(), f[b"t"].decode(), f[b"k"].decode(), f[b"d"]) for _, rows in got for i, f in rows]

    async def ack(self, socket_id: str, received: int) -> None:
        """The owner took socket ``socket_id`` on: how many client frames the session has handled."""
        key = self.k("ack", socket_id)
        pipe = self.r.pipeline(transaction=True)
        pipe.rpush(key, str(received))
        pipe.expire(key, 30)
        await self.call(pipe.execute())

    async def wait_ack(self, socket_id: str, timeout_s: float) -> int | None:
        """The owner's answer to an ``attach`` (None: it did not answer in time)."""
        got = await self.call(self.blocking.blpop([self.k("ack", socket_id)], timeout=timeout_s))
        return int(got[1]) if got else None

    # ------------------------------------------------------------------ message rate per key

    async def count_frames(self, counts: dict[str, int], window: int) -> dict[str, int]:
        """Add this replica's frames per key digest in second ``window``; the totals over replicas."""
        pipe = self.r.pipeline(transaction=False)
        for digest, n in counts.items():
            key = self.k("rate", f"{digest}:{window}")
            pipe.incrby(key, n)
            pipe.expire(key, 5)
        out = await self.call(pipe.execute())
        return {digest: int(out[2 * i]) for i, digest in enumerate(counts)}

    # ------------------------------------------------------------------ ek_ keys (gateway.cluster.secrets)

    async def put_secret(self, value_hash: str, parent: str, grant: str, expires_at_ms: int, limit: int) -> bool:
        """Keep an ek_ key's grant until it expires, unless key ``parent`` already has ``limit`` waiting."""
        keys = [self.k("ek", value_hash), self.k("eks", parent)]
        now = int(time.time() * 1000)
        return bool(await self.call(self._put_secret(keys=keys, args=[now, expires_at_ms, limit, grant, value_hash])))

    async def take_secret(self, value_hash: str) -> str | None:
        """An ek_ key's grant, deleted in the same command: one replica alone ever gets it."""
        raw = await self.call(self.r.getdel(self.k("ek", value_hash)))
        return raw.decode() if raw else None

    async def forget_secret(self, value_hash: str, parent: str) -> None:
        """A taken key no longer counts among ``parent``'s waiting ones."""
        await self.call(self.r.zrem(self.k("eks", parent), value_hash))
