"""Resume after disconnect: seq, replay buffer, tokens bound to keys, newer socket wins, expiry."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from testkit.fake_backend import FakeBackend
from tests.resume_client import CREATE, USER_MSG, Stream, connect, run_with_drops


@pytest.fixture(scope="module")
def fake():
    return FakeBackend(answer_tokens=60, step_s=0.004)


@pytest.fixture(scope="module")
def reference(fake, tmp_path_factory):
    from gateway.core.config import load_config
    from testkit.live_server import run_server

    async def once(addr):
        return await run_with_drops(addr, [])

    with run_server(load_config(None, **{"audio.enabled": False}), fake) as addr:
        s = asyncio.run(once(addr))
    assert s.count("response.done") == 1 and s.text()
    return s.text()


def cfg(**kw):
    return {"audio.enabled": False, **kw}


async def test_resume_replays_what_was_missed_then_continues(fake, reference, server_factory):
    with server_factory(fake, **cfg()) as addr:
        s = await run_with_drops(addr, [(8, "abort"), (5, "close"), (3, "abort")])
        assert s.drops >= 3 and s.resume_failed == 0 and s.fresh_sessions == 0
        assert s.text() == reference
        assert s.count("response.created") == 1 and s.count("response.done") == 1
        assert [e["seq"] for e in s.events] == list(range(len(s.events)))


async def test_session_resumed_comes_first_and_names_the_replay_start(fake, server_factory):
    with server_factory(fake, **cfg()) as addr:
        s = Stream()
        ws = await connect(addr, s)
        s.accept(json.loads(await ws.recv()))
        await ws.send(json.dumps(USER_MSG))
        await ws.send(json.dumps(CREATE))
        s.accept(json.loads(await ws.recv()))
        ws.transport.abort()
        ws2 = await connect(addr, s)
        hello = json.loads(await ws2.recv())
        assert hello["type"] == "session.resumed" and "seq" not in hello
        assert hello["replay_from_seq"] == s.last_seq + 1
        nxt = json.loads(await ws2.recv())
        assert nxt["seq"] == s.last_seq + 1
        await ws2.close()


async def test_resume_after_expiry_fails_cleanly(fake, server_factory):
    with server_factory(fake, **cfg(**{"server.grace_period_s": 0.2})) as addr:
        s = Stream()
        ws = await connect(addr, s)
        s.accept(json.loads(await ws.recv()))
        await ws.close()
        deadline = asyncio.get_running_loop().time() + 10
        while addr.call(lambda: len(addr.services.registry)) and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110 (server-side state, polled with a deadline)
            await asyncio.sleep(0.05)  # polling the server until the grace period has ended the session
        ws2 = await connect(addr, s)
        err = json.loads(await ws2.recv())
        assert err["type"] == "error" and err["error"]["code"] == "resume_failed"
        with pytest.raises(websockets.ConnectionClosed):
            await ws2.recv()
        assert addr.call(lambda: len(addr.services.registry)) == 0  # memory freed


async def test_lost_coverage_is_resume_failed_never_a_gap(fake, server_factory):
    with server_factory(fake, **cfg(**{"limits.replay_max_events": 8})) as addr:
        s = Stream()
        ws = await connect(addr, s)
        s.accept(json.loads(await ws.recv()))
        await ws.send(json.dumps(USER_MSG))
        await ws.send(json.dumps(CREATE))
        ws.transport.abort()
        await asyncio.sleep(1.0)  # the response finishes meanwhile: far more than 8 events
        ws2 = await connect(addr, s)
        err = json.loads(await ws2.recv())
        assert err["error"]["code"] == "resume_failed"


async def test_token_is_bound_to_the_api_key(fake, server_factory):
    keys = ["key-a", "key-b"]
    with server_factory(fake, **cfg(**{"server.api_keys": keys})) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", additional_headers={"Authorization": "Bearer key-a"})
        token = json.loads(await ws.recv())["resume"]["token"]
        await ws.close()
        url = f"ws://{addr}/v1/realtime?resume_token={token}&last_seq=0"
        other = await websockets.connect(url, additional_headers={"Authorization": "Bearer key-b"})
        assert json.loads(await other.recv())["error"]["code"] == "resume_failed"
        same = await websockets.connect(url, additional_headers={"Authorization": "Bearer key-a"})
        assert json.loads(await same.recv())["type"] == "session.resumed"
        await same.close()


async def test_newer_socket_wins_and_older_is_closed_4009(fake, server_factory):
    with server_factory(fake, **cfg()) as addr:
        s = Stream()
        old = await connect(addr, s)
        s.accept(json.loads(await old.recv()))
        new = await connect(addr, s)
        assert json.loads(await new.recv())["type"] == "session.resumed"
        with pytest.raises(websockets.ConnectionClosed) as info:
            while True:
                await old.recv()
        assert info.value.rcvd.code == 4009
        await new.send(json.dumps(USER_MSG))
        await new.send(json.dumps(CREATE))
        while json.loads(await new.recv())["type"] != "response.done":
            pass
        await new.close()


async def test_disconnect_without_grace_cancels_the_response(fake, server_factory):
    with server_factory(fake, **cfg(**{"server.grace_period_s": 0})) as addr:
        s = Stream()
        ws = await connect(addr, s)
        s.accept(json.loads(await ws.recv()))
        await ws.send(json.dumps(USER_MSG))
        await ws.send(json.dumps(CREATE))
        await ws.recv()
        ws.transport.abort()
        for _ in range(100):
            await asyncio.sleep(0.02)
            if addr.call(lambda: (len(addr.services.registry), addr.services.engine.depth)) == (0, (0, 0)):
                break
        assert addr.call(lambda: (len(addr.services.registry), addr.services.engine.depth)) == (0, (0, 0))
