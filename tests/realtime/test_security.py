"""Auth, origin, limits and exposure: each breach a clear error or close, before any model work."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
import websockets

from gateway.wiring.cli import main as cli_main
from testkit.fake_backend import FakeBackend

KEYS = {"audio.enabled": False, "server.api_keys": ["sk-test-123"]}


@pytest.fixture(scope="module")
def fake():
    return FakeBackend(answer_tokens=30, step_s=0.002)


async def test_ws_without_a_valid_key_is_closed_1008(fake, server_factory):
    with server_factory(fake, **KEYS) as addr:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            ws = await websockets.connect(f"ws://{addr}/v1/realtime", additional_headers=headers)
            with pytest.raises(websockets.ConnectionClosed) as info:
                await ws.recv()
            assert info.value.rcvd.code == 1008
        assert addr.call(lambda: addr.services.engine.depth) == (0, 0)


async def test_ws_key_by_header_or_browser_subprotocol(fake, server_factory):
    with server_factory(fake, **KEYS) as addr:
        ws = await websockets.connect(
            f"ws://{addr}/v1/realtime", additional_headers={"Authorization": "Bearer sk-test-123"}
        )
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.close()
        ws = await websockets.connect(
            f"ws://{addr}/v1/realtime", subprotocols=["realtime", "openai-insecure-api-key.sk-test-123"]
        )
        assert ws.subprotocol == "realtime"  # the key is never echoed back
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.close()


async def test_foreign_origin_is_refused_403_and_own_origin_allowed(fake, server_factory):
    with server_factory(fake, **{"audio.enabled": False}) as addr:
        with pytest.raises(websockets.InvalidStatus) as info:
            await websockets.connect(f"ws://{addr}/v1/realtime", origin="http://evil.example")
        assert info.value.response.status_code == 403
        port = addr.split(":")[1]
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", origin=f"http://localhost:{port}")
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.close()


async def test_origin_allowlist_is_exact(fake, server_factory):
    conf = {"audio.enabled": False, "server.allowed_origins": ["https://app.example.com"]}
    with server_factory(fake, **conf) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", origin="https://app.example.com")
        await ws.recv()
        await ws.close()
        with pytest.raises(websockets.InvalidStatus):
            await websockets.connect(f"ws://{addr}/v1/realtime", origin="https://app.example.com.evil.io")


def test_http_requires_the_key(fake, server_factory):
    with server_factory(fake, **KEYS) as addr:
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        r = httpx.post(f"http://{addr}/v1/chat/completions", json=body)
        assert r.status_code == 401 and r.json()["error"]["code"]
        r = httpx.post(f"http://{addr}/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-test-123"})
        assert r.status_code == 200


def test_no_keys_refuses_a_public_bind(capsys):
    assert cli_main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "no API keys" in capsys.readouterr().err


async def test_keys_and_message_bodies_never_reach_the_logs(fake, server_factory, caplog):
    caplog.set_level(logging.DEBUG)
    with server_factory(fake, **KEYS) as addr:
        ws = await websockets.connect(
            f"ws://{addr}/v1/realtime", additional_headers={"Authorization": "Bearer sk-test-123"}
        )
        await ws.recv()
        secret = "my-secret-diary-entry"
        await ws.send(
            json.dumps(
                {
                    "type": "conversation.item.create",
                    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": secret}]},
                }
            )
        )
        await ws.send('{"type": "bogus", "text": "' + secret + '"}')
        await ws.send(json.dumps({"type": "response.create"}))
        while json.loads(await ws.recv())["type"] != "response.done":
            pass
        await ws.close()
    # the test's own client library logs its handshake at DEBUG; everything else is the server's
    server_records = [r for r in caplog.records if not r.name.startswith("websockets.client")]
    leaks = [
        (r.name, r.getMessage()[:80])
        for r in server_records
        if "sk-test-123" in r.getMessage() or secret in r.getMessage()
    ]
    assert server_records and not leaks


async def test_message_flood_gets_rate_limited_then_closed_1008(fake, server_factory):
    conf = {
        "audio.enabled": False,
        "limits.messages_per_s": 20,
        "limits.messages_burst": 20,
        "limits.flood_close_after": 100,
    }
    with server_factory(fake, **conf) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime")
        await ws.recv()
        other = await websockets.connect(f"ws://{addr}/v1/realtime")
        await other.recv()
        for _ in range(400):
            await ws.send('{"type":"input_audio_buffer.clear"}')
        codes, close = set(), None
        try:
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if ev["type"] == "error":
                    codes.add(ev["error"]["code"])
        except websockets.ConnectionClosed as exc:
            close = exc.rcvd.code if exc.rcvd else None
        assert "rate_limited" in codes and close == 1008
        await other.send('{"type":"session.update","session":{"instructions":"x"}}')
        assert json.loads(await other.recv())["type"] == "session.updated"
        await other.close()


async def test_sessions_per_key_are_capped(fake, server_factory):
    with server_factory(fake, **{**KEYS, "limits.max_sessions_per_key": 2}) as addr:
        hdr = {"Authorization": "Bearer sk-test-123"}
        a = await websockets.connect(f"ws://{addr}/v1/realtime", additional_headers=hdr)
        b = await websockets.connect(f"ws://{addr}/v1/realtime", additional_headers=hdr)
        await a.recv()
        await b.recv()
        c = await websockets.connect(f"ws://{addr}/v1/realtime", additional_headers=hdr)
        with pytest.raises(websockets.ConnectionClosed) as info:
            await c.recv()
        assert info.value.rcvd.code == 1013 and "API key" in info.value.rcvd.reason
        await a.close()
        await b.close()


async def test_oversize_frames_close_1009(fake, server_factory):
    conf = {"audio.enabled": False, "limits.max_text_frame_bytes": 4096, "limits.max_binary_frame_bytes": 1024}
    with server_factory(fake, **conf) as addr:
        for payload in ("x" * 10_000, b"\0" * 2048):
            ws = await websockets.connect(f"ws://{addr}/v1/realtime")
            await ws.recv()
            await ws.send(payload)
            with pytest.raises(websockets.ConnectionClosed) as info:
                while True:
                    await ws.recv()
            assert info.value.rcvd is not None and info.value.rcvd.code == 1009
