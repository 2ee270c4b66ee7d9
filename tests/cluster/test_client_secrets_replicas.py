"""ek_ keys across two real gateway replicas sharing a real Redis: minted on one, used on the other,
once only across both (even when both are offered it at the same moment), and counted against the
minting key's sessions on all replicas."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from testkit.replicas import RedisServer, replicas_running
from tests.resume_client import WS_OPTS, recv

KEY = "sk-cluster-1"
FIXED = "Answer in the voice of a lighthouse keeper."


@pytest.fixture(scope="module")
def pair(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    tmp = tmp_path_factory.mktemp("ek")
    conf = {
        "server": {"grace_period_s": 0, "api_keys": [KEY, "sk-cluster-2"]},
        "replicas": {"lease_s": 1.0},
        "limits": {"max_sessions_per_key": 2},
    }
    with replicas_running(tmp, redis_server.url, settings=conf) as procs:
        yield [f"127.0.0.1:{p.port}" for p in procs]


def mint(addr: str, key: str = KEY) -> str:
    body = {"session": {"type": "realtime", "instructions": FIXED}}
    r = httpx.post(
        f"http://{addr}/v1/realtime/client_secrets", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert r.status_code == 200, r.text
    return str(r.json()["value"])


async def first_event(addr: str, credential: str) -> tuple[Any, dict[str, Any] | int]:
    """The socket and its first event, or the close code it got instead."""
    ws = await websockets.connect(
        f"ws://{addr}/v1/realtime", additional_headers={"Authorization": f"Bearer {credential}"}, **WS_OPTS
    )
    try:
        return ws, await recv(ws, 10)
    except websockets.ConnectionClosed as closed:
        assert closed.rcvd is not None
        return ws, closed.rcvd.code


def test_a_key_minted_on_one_replica_opens_a_session_on_the_other_once(pair):
    a, b = pair

    async def main():
        value = mint(a)
        ws, ev = await first_event(b, value)
        assert isinstance(ev, dict) and ev["type"] == "session.created"
        assert ev["session"]["instructions"] == FIXED  # the config fixed on a, applied on b
        await ws.send(json.dumps({"type": "session.update", "session": {"instructions": "be a pirate"}}))
        while (ev := await recv(ws, 10))["type"] != "session.updated":
            pass
        assert ev["session"]["instructions"] == FIXED
        for addr in (a, b):  # spent on both
            again, code = await first_event(addr, value)
            assert code == 1008
        await ws.close()

    asyncio.run(main())


def test_one_key_offered_to_both_replicas_at_once_opens_exactly_one_session(pair):
    a, b = pair

    async def main():
        for _ in range(5):
            value = mint(b)
            got = await asyncio.gather(first_event(a, value), first_event(b, value))
            outcomes = sorted(str(ev["type"]) if isinstance(ev, dict) else str(ev) for _, ev in got)
            assert outcomes == ["1008", "session.created"], outcomes
            for ws, _ in got:
                await ws.close()

    asyncio.run(main())


def test_ek_sessions_count_against_the_minting_keys_sessions_on_all_replicas(pair):
    a, b = pair

    async def main():
        w1, e1 = await first_event(a, mint(a, "sk-cluster-2"))
        w2, e2 = await first_event(b, mint(a, "sk-cluster-2"))
        assert isinstance(e1, dict) and isinstance(e2, dict)
        w3, code = await first_event(b, mint(b, "sk-cluster-2"))  # a third: over 2 per key, cluster-wide
        assert code == 1013
        for w in (w1, w2, w3):
            await w.close()

    asyncio.run(main())
