"""Failures of a replica and of Redis itself, with real processes: kill -9 of the owner mid-response,
a Redis restart (a cache-only Redis comes back empty)."""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import redis
import websockets

from testkit.remote_engines import EngineProcess
from testkit.replicas import RedisServer, replica
from tests.cluster.replica_client import Run, turn, user
from tests.resume_client import WS_OPTS, recv

LEASE_S = 1.0
CONF = {"server": {"grace_period_s": 120}, "replicas": {"lease_s": LEASE_S}}


def start_pair(tmp, url: str, lease_s: float = LEASE_S, **fake: float) -> list[EngineProcess]:
    """Two replicas the test stops itself (it kills or terminates one of them on purpose)."""
    conf = {**CONF, "replicas": {"lease_s": lease_s}}
    procs = [replica(tmp, url, settings=conf, **fake) for _ in range(2)]
    try:
        for p in procs:
            p.start()
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return procs


def ready(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_for(pred, what: str, timeout_s: float = 15.0) -> None:
    """Poll a condition with a deadline (the state lives in other processes)."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def slow_pair(redis_server: RedisServer, tmp_path) -> Iterator[list[EngineProcess]]:
    procs = start_pair(tmp_path, redis_server.url, answer_tokens=400, step_s=0.02)  # 8 s per reply
    yield procs
    for p in procs:
        p.stop()


def test_owner_killed_mid_response_the_other_replica_ends_it_and_the_session_goes_on(slow_pair):
    owner, other = slow_pair

    async def main():
        run = Run()
        ws = await websockets.connect(f"ws://127.0.0.1:{owner.port}/v1/realtime", **WS_OPTS)
        run.accept(await recv(ws, 10))
        await ws.send(user("tell me"))
        await ws.send(json.dumps({"type": "response.create"}))
        while run.count("response.output_text.delta") < 10:
            run.accept(await recv(ws, 10))
        owner.kill()  # SIGKILL: no goodbye, the lease just stops being renewed
        killed = time.monotonic()
        with pytest.raises(websockets.ConnectionClosed):
            while True:  # whatever the owner still had in flight before it died
                run.accept(await recv(ws, 10))
        ws2 = await websockets.connect(
            f"ws://127.0.0.1:{other.port}/v1/realtime?resume_token={run.token}&last_seq={run.last_seq}", **WS_OPTS
        )
        hello = await recv(ws2, 10)
        assert hello["type"] == "session.resumed"
        while run.count("response.done") == 0:
            run.accept(await recv(ws2, 10))
        took = time.monotonic() - killed
        done = [e for e in run.events if e["type"] == "response.done"][0]["response"]
        assert done["status"] == "incomplete"
        assert done["status_details"] == {"type": "incomplete", "reason": "server_error"}
        delivered = run.text(0)
        assert delivered and done["output"][0]["content"][0]["text"] == delivered  # nothing lost, nothing twice
        assert run.duplicates == 0 and run.gaps == 0
        # the session goes on there: the next turn answers with the delivered text in its history
        await ws2.send(user("and then?"))
        await ws2.send(json.dumps({"type": "response.create"}))
        while run.count("response.done") < 2:
            run.accept(await recv(ws2, 30))
        await ws2.close()
        second = [e for e in run.events if e["type"] == "response.done"][1]["response"]
        assert second["status"] == "completed"
        return run, delivered, took

    run, delivered, took = asyncio.run(main())
    print(f"owner killed: response.done incomplete {took * 1000:.0f} ms after the kill (lease {LEASE_S} s)")
    assert took < LEASE_S + 10  # generous on a loaded CI box; bench replicas measures it

    async def reference() -> str:  # the same history, typed into a fresh session on the survivor
        ref = Run()
        ws = await websockets.connect(f"ws://127.0.0.1:{other.port}/v1/realtime", **WS_OPTS)
        ref.accept(await recv(ws, 10))
        assistant = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": delivered}]}
        for frame in (user("tell me"), json.dumps({"type": "conversation.item.create", "item": assistant})):
            await ws.send(frame)
        await ws.send(user("and then?"))
        await ws.send(json.dumps({"type": "response.create"}))
        while ref.count("response.done") == 0:
            ref.accept(await recv(ws, 30))
        await ws.close()
        return ref.text(0)

    assert run.text(1) == asyncio.run(reference())


def test_redis_restart(redis_server: RedisServer, tmp_path):
    """Redis down: /ready false, new sessions refused with store_unavailable, a socket attached to
    its owner streams on. Redis back (empty): /ready true, the owner writes its sessions again, and
    they resume on the other replica."""
    a, b = start_pair(tmp_path, redis_server.url, answer_tokens=120, step_s=0.004)
    try:
        rng = random.Random(3)
        run = Run()
        asyncio.run(turn(run, [f"127.0.0.1:{a.port}"], "tell me", [], rng))
        assert ready(a.port) == ready(b.port) == 200

        redis_server.stop()
        wait_for(lambda: ready(a.port) == 503 and ready(b.port) == 503, "/ready to say the store is down")

        async def refused() -> tuple[dict, int]:
            ws = await websockets.connect(f"ws://127.0.0.1:{b.port}/v1/realtime", **WS_OPTS)
            err = await recv(ws, 10)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await recv(ws, 10)
            return err, closed.value.rcvd.code

        err, code = asyncio.run(refused())
        assert err["type"] == "error" and err["error"]["code"] == "store_unavailable" and code == 1013
        asyncio.run(turn(run, [f"127.0.0.1:{a.port}"], "and then?", [], rng))  # the owner streams on
        assert run.count("response.done") == 2 and run.duplicates == 0 and run.gaps == 0

        redis_server.start()  # same port, empty
        wait_for(lambda: ready(a.port) == 200 and ready(b.port) == 200, "/ready after Redis is back")
        r = redis.Redis.from_url(redis_server.url)
        # the owner's heartbeat finds its lease gone and writes the session again (a resume on the
        # other replica before that finds no record: resume_failed, which the client counts)
        wait_for(lambda: bool(r.exists(f"so:s:{run.token}")), "the owner to write its session again")
        r.close()
        # the owner rewrites what Redis lost (its heartbeat finds the lease gone); then the other replica resumes it
        asyncio.run(turn(run, [f"127.0.0.1:{b.port}"], "go on", [], rng, recv_timeout_s=15))
        assert run.count("response.done") == 3
        assert run.resume_failed == 0 and run.duplicates == 0 and run.gaps == 0
        assert [e["seq"] for e in run.events] == list(range(len(run.events)))
    finally:
        for p in (a, b):
            p.stop()


def test_a_replica_shutting_down_hands_its_sessions_to_the_cluster(redis_server: RedisServer, tmp_path):
    """SIGTERM (a rolling restart): the client gets 1012, resumes on the other replica at once (no
    lease to wait out), and the conversation goes on there."""
    lease_s = 10.0  # a takeover that waited for the lease would take this long
    a, b = start_pair(tmp_path, redis_server.url, lease_s, answer_tokens=120, step_s=0.004)
    try:
        rng = random.Random(5)
        run = Run()
        addr_a, addr_b = f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"
        asyncio.run(turn(run, [addr_a], "tell me", [], rng))
        ref = Run()
        asyncio.run(turn(ref, [addr_b], "tell me", [], rng))
        asyncio.run(turn(ref, [addr_b], "and then?", [], rng))

        async def attached_through_shutdown() -> tuple[int, float]:
            ws = await websockets.connect(
                f"ws://{addr_a}/v1/realtime?resume_token={run.token}&last_seq={run.last_seq}", **WS_OPTS
            )
            assert (await recv(ws, 10))["type"] == "session.resumed"
            a.proc.terminate()  # SIGTERM: drain, hand off, close 1012
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await recv(ws, 30)
            t0 = time.monotonic()
            ws2 = await websockets.connect(
                f"ws://{addr_b}/v1/realtime?resume_token={run.token}&last_seq={run.last_seq}", **WS_OPTS
            )
            hello = await recv(ws2, 10)
            await ws2.close()
            assert hello["type"] == "session.resumed", hello
            return closed.value.rcvd.code, time.monotonic() - t0

        code, took = asyncio.run(attached_through_shutdown())
        assert code == 1012
        assert took < lease_s  # taken over at once: the lease was released, not waited out
        asyncio.run(turn(run, [addr_b], "and then?", [], rng))
        assert run.text(1) == ref.text(1)  # its history came along
        assert run.duplicates == 0 and run.gaps == 0 and run.resume_failed == 0
    finally:
        for p in (a, b):
            p.stop()
