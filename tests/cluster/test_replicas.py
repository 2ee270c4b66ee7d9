"""Two real gateway processes sharing sessions through a real Redis: resume on either replica at
random cut points, a later turn on the other one, per-key limits counted across them.

The replicas run the deterministic fake model (testkit.serve_fake): greedy text is a pure function
of the conversation, so a reply assembled across cuts and replicas must equal the reference
answered on one replica without cuts. Every receive has a timeout (a stall fails as ``Stalled``)."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
from collections.abc import Iterator

import pytest
import websockets

from testkit.replicas import RedisServer, replicas_running
from tests.cluster.replica_client import Run, turn, user
from tests.resume_client import WS_OPTS, recv

CONF = {"server": {"grace_period_s": 120}, "replicas": {"lease_s": 1.0}, "limits": {"max_sessions": 4000}}
SAY = ["tell me", "and then?"]


@pytest.fixture(scope="module")
def pair(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    tmp = tmp_path_factory.mktemp("replicas")
    with replicas_running(tmp, redis_server.url, settings=CONF, answer_tokens=120, step_s=0.004) as procs:
        yield [f"127.0.0.1:{p.port}" for p in procs]


def reference(addr: str) -> list[str]:
    """Both turns answered on one replica, no cuts."""
    run = Run()
    rng = random.Random(0)
    for say in SAY:
        asyncio.run(turn(run, [addr], say, [], rng))
    return [run.text(0), run.text(1)]


def check(run: Run, ref: list[str]) -> None:
    assert run.duplicates == 0 and run.gaps == 0 and run.resume_failed == 0
    assert [e["seq"] for e in run.events] == list(range(len(run.events)))
    assert run.count("response.created") == run.count("response.done") == len(ref)
    assert [run.text(i) for i in range(len(ref))] == ref


def test_200_resumes_on_random_replicas_lose_and_duplicate_nothing(pair):
    ref = reference(pair[0])
    assert ref[0] and ref[1] and ref[0] != ref[1]
    assert reference(pair[1]) == ref  # the same model on both
    rng = random.Random(18)  # fixed: a red run must be reproducible
    resumes = runs = 0
    used: set[str] = set()
    latency: list[float] = []
    while resumes < 200:
        run = Run()
        for say in SAY:
            cuts = [(rng.randint(1, 6), rng.choice(["abort", "close"])) for _ in range(rng.randint(3, 12))]
            asyncio.run(turn(run, pair, say, cuts, rng))
        check(run, ref)
        resumes += run.resumes
        runs += 1
        used |= run.replicas_used
        latency += run.resume_ms
        assert runs < 60, f"only {resumes} resumes in {runs} runs"
    assert used == set(pair)
    print(f"replicas: {resumes} resumes in {runs} runs; reconnect → first event {statistics.median(latency):.1f} ms")


def test_a_later_turn_on_the_other_replica_continues_the_conversation(pair):
    ref = reference(pair[0])
    run = Run()
    rng = random.Random(1)
    asyncio.run(turn(run, [pair[0]], SAY[0], [], rng))
    asyncio.run(turn(run, [pair[1]], SAY[1], [], rng))  # proxied to the owner: its history answers
    check(run, ref)


async def open_session(addr: str, key: str) -> tuple[object, dict]:
    ws = await websockets.connect(
        f"ws://{addr}/v1/realtime", additional_headers={"Authorization": f"Bearer {key}"}, **WS_OPTS
    )
    return ws, await recv(ws, 10)


@pytest.fixture(scope="module")
def keyed_pair(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    tmp = tmp_path_factory.mktemp("keyed")
    conf = {
        "server": {**CONF["server"], "api_keys": ["k1", "k2", "k3"]},
        "replicas": CONF["replicas"],
        "limits": {**CONF["limits"], "max_sessions_per_key": 2, "messages_per_s_per_key": 30},
    }
    with replicas_running(tmp, redis_server.url, settings=conf) as procs:
        yield [f"127.0.0.1:{p.port}" for p in procs]


def test_sessions_per_key_are_counted_across_replicas(keyed_pair):
    a, b = keyed_pair

    async def main():
        w1, e1 = await open_session(a, "k1")
        w2, e2 = await open_session(b, "k1")
        assert e1["type"] == e2["type"] == "session.created"
        w3 = await websockets.connect(
            f"ws://{a}/v1/realtime", additional_headers={"Authorization": "Bearer k1"}, **WS_OPTS
        )
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await recv(w3, 10)
        assert closed.value.rcvd.code == 1013 and "too many sessions for this API key" in closed.value.rcvd.reason
        w4, e4 = await open_session(a, "k2")  # another key is not affected
        assert e4["type"] == "session.created"
        await w2.close()  # with grace 120 s it still counts until it expires …
        for w in (w1, w4):
            await w.close()

    asyncio.run(main())


def test_message_rate_per_key_is_counted_across_replicas(keyed_pair):
    """Two sockets of key k3, one per replica, each well under 30 frames/s alone, together over it."""
    a, b = keyed_pair

    async def pace(ws, n: int) -> None:
        for _ in range(n):
            await ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
            await asyncio.sleep(0.05)  # pacing the sender (20 frames/s), not synchronisation

    async def errors(ws, window_s: float) -> list[str]:
        codes = []
        loop = asyncio.get_running_loop()
        end = loop.time() + window_s
        while (left := end - loop.time()) > 0:
            try:
                ev = json.loads(await asyncio.wait_for(ws.recv(), left))
            except TimeoutError:
                break
            if ev["type"] == "error":
                codes.append(ev["error"]["code"])
        return codes

    async def main():
        w1, _ = await open_session(a, "k3")
        alone = await asyncio.gather(pace(w1, 40), errors(w1, 2.5))
        assert "rate_limited" not in alone[1]  # 20/s alone is under the key's 30/s
        w2, _ = await open_session(b, "k3")
        both = await asyncio.gather(pace(w1, 40), pace(w2, 40), errors(w1, 2.5), errors(w2, 2.5))
        assert "rate_limited" in both[2] + both[3]  # 40/s over the two replicas is not
        for w in (w1, w2):
            await w.close()

    asyncio.run(main())


def test_a_cancel_sent_through_the_other_replica_stops_the_owners_response(pair):
    owner, other = pair

    async def main() -> Run:
        run = Run()
        ws = await websockets.connect(f"ws://{owner}/v1/realtime", **WS_OPTS)
        run.accept(await recv(ws, 10))
        await ws.close()
        ws = await websockets.connect(
            f"ws://{other}/v1/realtime?resume_token={run.token}&last_seq={run.last_seq}", **WS_OPTS
        )
        assert (await recv(ws, 10))["type"] == "session.resumed"
        await ws.send(user("tell me"))
        await ws.send(json.dumps({"type": "response.create"}))
        while not run.count("response.output_text.delta"):
            run.accept(await recv(ws, 10))
        await ws.send(json.dumps({"type": "response.cancel"}))
        while not run.count("response.done"):
            run.accept(await recv(ws, 10))
        await ws.close()
        return run

    run = asyncio.run(main())
    done = [e for e in run.events if e["type"] == "response.done"][0]["response"]
    assert done["status"] == "cancelled"
    assert run.text(0) and len(run.text(0)) < len(reference(owner)[0])  # stopped short of the full reply
    assert run.duplicates == 0 and run.gaps == 0
