"""The key that authenticates a WebSocket is the key its session is bound to and counted against."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from .conftest import TWO_KEYS

KEY_PROTO = "openai-insecure-api-key."


async def _closed_with(ws: websockets.ClientConnection) -> tuple[int, str]:
    with pytest.raises(websockets.ConnectionClosed) as info:
        await asyncio.wait_for(ws.recv(), 5)
    assert info.value.rcvd is not None
    return info.value.rcvd.code, info.value.rcvd.reason


@pytest.mark.parametrize(
    ("headers", "subprotocols"),
    [
        ({"Authorization": "Bearer fake-1"}, ["realtime", KEY_PROTO + "key-bob"]),  # bad bearer + good subprotocol
        ({"Authorization": "Bearer key-alice"}, ["realtime", KEY_PROTO + "key-bob"]),  # two good, different keys
        ({}, ["realtime", KEY_PROTO + "fake-2", KEY_PROTO + "key-bob"]),  # two subprotocol keys
        ({}, ["realtime", KEY_PROTO + "key-alice", KEY_PROTO + "key-bob"]),
    ],
)
async def test_conflicting_credentials_are_refused(fake, server_factory, headers, subprotocols):
    with server_factory(fake, **TWO_KEYS) as addr:
        ws = await websockets.connect(
            f"ws://{addr}/v1/realtime", additional_headers=headers, subprotocols=subprotocols, open_timeout=5
        )
        code, reason = await _closed_with(ws)
        assert code == 1008 and "one API key" in reason
        assert addr.call(lambda: len(addr.services.registry)) == 0


async def test_the_same_key_twice_is_one_credential(fake, server_factory):
    with server_factory(fake, **TWO_KEYS) as addr:
        ws = await websockets.connect(
            f"ws://{addr}/v1/realtime",
            additional_headers={"Authorization": "Bearer key-bob"},
            subprotocols=["realtime", KEY_PROTO + "key-bob"],
            open_timeout=5,
        )
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "session.created"
        await ws.close()


async def test_sessions_count_against_the_key_that_authenticated(fake, server_factory):
    """bob fills his per-key quota whichever way he sends his key; alice still gets in."""
    conf = {**TWO_KEYS, "limits.max_sessions_per_key": 2, "limits.max_sessions": 4}
    with server_factory(fake, **conf) as addr:
        url = f"ws://{addr}/v1/realtime"
        bob = [
            await websockets.connect(url, additional_headers={"Authorization": "Bearer key-bob"}, open_timeout=5),
            await websockets.connect(url, subprotocols=["realtime", KEY_PROTO + "key-bob"], open_timeout=5),
        ]
        for ws in bob:
            assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "session.created"
        third = await websockets.connect(url, subprotocols=[KEY_PROTO + "key-bob"], open_timeout=5)
        code, reason = await _closed_with(third)
        assert code == 1013 and "API key" in reason
        alice = await websockets.connect(url, additional_headers={"Authorization": "Bearer key-alice"}, open_timeout=5)
        assert json.loads(await asyncio.wait_for(alice.recv(), 5))["type"] == "session.created"
        for ws in [*bob, alice]:
            await ws.close()


async def test_a_session_bound_by_subprotocol_resumes_only_with_that_key(fake, server_factory):
    with server_factory(fake, **TWO_KEYS) as addr:
        url = f"ws://{addr}/v1/realtime"
        ws = await websockets.connect(url, subprotocols=[KEY_PROTO + "key-bob"], open_timeout=5)
        token = json.loads(await asyncio.wait_for(ws.recv(), 5))["resume"]["token"]
        await ws.close()
        thief = await websockets.connect(
            f"{url}?resume_token={token}&last_seq=0",
            additional_headers={"Authorization": "Bearer key-alice"},
            open_timeout=5,
        )
        assert json.loads(await asyncio.wait_for(thief.recv(), 5))["error"]["code"] == "resume_failed"
        owner = await websockets.connect(
            f"{url}?resume_token={token}&last_seq=0",
            additional_headers={"Authorization": "Bearer key-bob"},
            open_timeout=5,
        )
        assert json.loads(await asyncio.wait_for(owner.recv(), 5))["type"] == "session.resumed"
        await owner.close()
