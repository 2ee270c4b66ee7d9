"""A big text frame sent to a replica that does not own the session: it reaches the app undecoded
(gateway.core.ws_frames), and the proxy still forwards it whole to the owner, which answers it; one that
is not UTF-8 closes the socket with 1007, as the WebSocket layer closes a small one."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import websockets

from testkit.replicas import RedisServer, replicas_running
from tests.resume_client import WS_OPTS, recv

CONF = {"server": {"grace_period_s": 120}, "replicas": {"lease_s": 1.0}}


@pytest.fixture(scope="module")
def pair(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    tmp = tmp_path_factory.mktemp("bigframes")
    with replicas_running(tmp, redis_server.url, settings=CONF) as procs:
        yield [f"127.0.0.1:{p.port}" for p in procs]


async def proxied(pair: list[str]) -> websockets.ClientConnection:
    """A session made on replica 0, resumed on replica 1 (which proxies it to 0)."""
    async with websockets.connect(f"ws://{pair[0]}/v1/realtime", **WS_OPTS) as ws:
        created = await recv(ws, 10)
    token, seq = created["resume"]["token"], created["seq"]
    ws = await websockets.connect(f"ws://{pair[1]}/v1/realtime?resume_token={token}&last_seq={seq}", **WS_OPTS)
    assert (await recv(ws, 10))["type"] == "session.resumed"
    return ws


async def test_a_big_frame_through_the_proxy_reaches_the_owner(pair):
    big = json.dumps({"type": "response.create", "response": {"instructions": "é" * 300_000}}, ensure_ascii=False)
    ws = await proxied(pair)
    try:
        await ws.send(big)
        err = await recv(ws, 60)
    finally:
        await ws.close()
    assert (err["type"], err["error"]["code"]) == ("error", "input_too_large")
    assert err["error"]["message"].startswith("instructions are 300000 characters")


async def test_a_big_frame_that_is_not_utf8_closes_the_proxied_socket_with_1007(pair):
    ws = await proxied(pair)
    await ws.send(b'{"type": "x.unknown", "pad": "' + b"A" * 300_000 + b'\xff"}', text=True)
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await recv(ws, 60)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
