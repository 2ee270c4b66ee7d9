"""The store is input too: garbage in one session's Redis keys (snapshot, events, lease, record) ends
that session's resume with ``error {code: resume_failed}`` and a clean close on the replica that
reads it, never a dropped socket or a traceback, and every other session resumes as before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import redis
import websockets

from testkit.replicas import RedisServer, replicas_running
from tests.cluster.replica_client import user
from tests.resume_client import WS_OPTS, recv

CONF = {"server": {"grace_period_s": 120}, "replicas": {"lease_s": 1.0}}


@pytest.fixture(scope="module")
def pair(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], list]]:
    tmp = tmp_path_factory.mktemp("corrupt")
    with replicas_running(tmp, redis_server.url, settings=CONF, answer_tokens=5) as procs:
        yield [f"127.0.0.1:{p.port}" for p in procs], procs


async def open_session(addr: str) -> tuple[str, int]:
    """A session on ``addr`` with one user item; its token and the last seq seen; its socket closed."""
    ws = await websockets.connect(f"ws://{addr}/v1/realtime", **WS_OPTS)
    created = await recv(ws, 10)
    assert created["type"] == "session.created"
    await ws.send(user("hello"))
    seq = created["seq"]
    while True:
        ev = await recv(ws, 10)
        seq = ev["seq"]
        if ev["type"] == "conversation.item.done":
            break
    await ws.close()
    return created["resume"]["token"], seq


async def resume(addr: str, token: str, seq: int) -> tuple[list[dict], int | None]:
    """Every event until the server closes (or 10 s pass), and the close code."""
    ws = await websockets.connect(f"ws://{addr}/v1/realtime?resume_token={token}&last_seq={seq}", **WS_OPTS)
    events: list[dict] = []
    try:
        while True:
            events.append(await recv(ws, 10))
            if events[0]["type"] == "session.resumed":
                break  # a healthy resume: enough
    except websockets.ConnectionClosed:
        pass
    await ws.close()
    return events, ws.close_code


GARBAGE = {
    "snapshot: not JSON": lambda r, k: r.set(k("snap"), b"{garbage"),
    "snapshot: JSON of another shape": lambda r, k: r.set(k("snap"), json.dumps({"seq": "x", "options": [1]})),
    "snapshot: a key of another type": lambda r, k: (r.delete(k("snap")), r.rpush(k("snap"), b"x")),
    "events: a key of another type": lambda r, k: (r.delete(k("e")), r.set(k("e"), b"x")),
    "events: entries without their field": lambda r, k: (r.delete(k("e")), r.xadd(k("e"), {"zz": b"\xff"}, id="1-0")),
    "lease: not text": lambda r, k: r.set(k("lease"), b"\xff\xfe\xfd", px=60_000),
    "lease: a key of another type": lambda r, k: (r.delete(k("lease")), r.sadd(k("lease"), b"x")),
    "record: a key of another type": lambda r, k: (r.delete(k("s")), r.set(k("s"), b"x")),
}


@pytest.mark.parametrize("what", list(GARBAGE))
def test_garbage_in_one_sessions_keys_fails_its_resume_cleanly(pair, redis_server: RedisServer, what: str):
    (owner, other), procs = pair

    async def main():
        victim, v_seq = await open_session(owner)
        healthy, h_seq = await open_session(owner)
        r = redis.Redis.from_url(redis_server.url)
        try:
            GARBAGE[what](r, lambda kind: f"so:{kind}:{victim}")
        finally:
            r.close()
        events, code = await resume(other, victim, v_seq)
        fine, _ = await resume(other, healthy, h_seq)
        return events, code, fine

    events, code, fine = asyncio.run(main())
    assert events and events[-1]["type"] == "error", (what, events)
    assert events[-1]["error"]["code"] == "resume_failed", (what, events)
    assert code == 1000, (what, code)
    assert fine[0]["type"] == "session.resumed", (what, fine)
    for p in procs:
        log = p.log.read_text() if p.log.exists() else ""
        assert "Traceback" not in log, log[-3000:]
