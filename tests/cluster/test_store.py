"""gateway.cluster.store against a real Redis: what each call promises."""

from __future__ import annotations

import asyncio
import secrets

from gateway.cluster.store import RedisStore, StoreUnavailable
from testkit.replicas import RedisServer


def fresh(server: RedisServer, lease_s: float = 1.0) -> RedisStore:
    return RedisStore(server.url, lease_s, prefix=f"t{secrets.token_hex(4)}:")  # a namespace per test


def events(n: int, start: int = 0) -> list[tuple[int, str]]:
    return [(i, f'{{"type":"e","seq":{i}}}') for i in range(start, start + n)]


def test_events_after_is_exact_and_says_when_events_are_gone(redis_server):
    async def main():
        st = fresh(redis_server)
        await st.publish("tok", "kd", 30, events(5), {"seq": 4}, max_events=4, fresh=True)
        await st.publish("tok", "kd", 30, events(3, 5), None, max_events=4)
        entries, top = await st.events_after("tok", 5)
        assert [s for s, _ in entries] == [6, 7] and top == 7
        assert (await st.events_after("tok", 7)) == ([], 7)
        assert await st.events_after("tok", 2) is None  # trimmed to 4 events: 3 is gone
        assert await st.events_after("tok", 8) is None  # never sent
        assert await st.events_after("nope", -1) is None
        assert (await st.record("tok")) == {"key": "kd", "grace": "30"}
        assert await st.holder("tok") == st.replica
        await st.close()

    asyncio.run(main())


def test_per_key_admission_is_counted_across_stores(redis_server):
    async def main():
        a, b = fresh(redis_server), fresh(redis_server)
        b.prefix = a.prefix  # two replicas of one cluster
        assert await a.admit("key1", "t1", 2, 30)
        assert await b.admit("key1", "t2", 2, 30)
        assert not await a.admit("key1", "t3", 2, 30)
        assert await b.admit("key2", "t3", 2, 30)  # another key has its own count
        await a.publish("t1", "key1", 30, events(1), {"seq": 0}, 10, fresh=True)
        await a.end("t1", "key1")
        assert await b.admit("key1", "t3", 2, 30)  # an ended session no longer counts
        await a.close()
        await b.close()

    asyncio.run(main())


def test_lease_renew_acquire_and_loss(redis_server):
    async def main():
        a, b = fresh(redis_server, lease_s=0.3), fresh(redis_server, lease_s=0.3)
        b.prefix = a.prefix
        await a.publish("tok", "kd", 30, events(1), {"seq": 0}, 10, fresh=True)
        assert await a.renew({"tok": ("kd", 30)}) == {"tok": 1}
        assert not await b.acquire("tok")  # held
        await a.r.delete(a.k("lease", "tok"))  # as if the owner went silent past its lease
        assert await b.acquire("tok")
        assert await a.renew({"tok": ("kd", 30)}) == {"tok": 0}  # it is b's now
        await b.r.delete(b.k("lease", "tok"))  # as if Redis restarted empty
        assert await b.renew({"tok": ("kd", 30)}) == {"tok": 2}
        await a.close()
        await b.close()

    asyncio.run(main())


def test_commands_reach_the_owner_in_order_and_ack(redis_server):
    async def main():
        owner, other = fresh(redis_server), fresh(redis_server)
        other.prefix = owner.prefix
        for i in range(3):
            await other.command(owner.replica, "tok", "text", f"frame {i}")
        rows = await owner.commands("0", 100)
        assert [(t, k, d) for _, t, k, d in rows] == [("tok", "text", f"frame {i}".encode()) for i in range(3)]
        assert await owner.commands(rows[-1][0], 50) == []
        await owner.ack("sock", 7)
        assert await other.wait_ack("sock", 1.0) == 7
        assert await other.wait_ack("sock", 0.1) is None
        await owner.close()
        await other.close()

    asyncio.run(main())


def test_an_unreachable_redis_fails_fast(redis_server):
    async def main():
        from testkit.live_server import free_port

        st = RedisStore(f"redis://127.0.0.1:{free_port()}/0", 1.0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            await st.record("tok")
        except StoreUnavailable:
            pass
        else:
            raise AssertionError("no error from a Redis that is not there")
        assert loop.time() - t0 < 5  # no retries with exponential backoff (seconds each)
        assert not st.available and not await st.ping()
        await st.close()

    asyncio.run(main())
