"""The official openai SDK resumes a session through its on_reconnecting hook; slow consumers; drain."""

from __future__ import annotations

import asyncio
import json
import time

import websockets
from openai import AsyncOpenAI

from testkit.fake_backend import FakeBackend
from tests.resume_client import run_with_drops


def _kick(addr, code: int) -> None:
    def do():
        for live in addr.services.registry.sessions.values():
            if live.attached is not None:
                live.attached.kick(code, "test: server-side close")

    addr.call(do)


async def test_openai_sdk_on_reconnecting_resumes_the_stream(server_factory):
    fake = FakeBackend(answer_tokens=120, step_s=0.003)
    with server_factory(fake, **{"audio.enabled": False}) as addr:
        reference = (await run_with_drops(addr, [])).text()
        seen = {"token": None, "last": -1, "reconnects": 0}

        def on_reconnecting(ev):
            seen["reconnects"] += 1
            query = {**ev.extra_query, "resume_token": seen["token"], "last_seq": str(seen["last"])}
            return {"extra_query": query}

        client = AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused")
        text, kicked, dup = "", False, 0
        async with client.realtime.connect(model="fake", on_reconnecting=on_reconnecting) as conn:
            async for event in conn:
                extra = event.model_extra or {}
                if event.type == "session.created":
                    seen["token"] = extra["resume"]["token"]
                    await conn.conversation.item.create(
                        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "tell me"}]}
                    )
                    await conn.response.create(response={"scheduler": {"strategy": "fast"}})
                seq = extra.get("seq")
                if seq is None:
                    continue
                if seq <= seen["last"]:
                    dup += 1
                    continue
                assert seq == seen["last"] + 1
                seen["last"] = seq
                if event.type == "response.output_text.delta":
                    text += event.delta
                    if not kicked and len(text) > 20:
                        kicked = True
                        _kick(addr, 1012)  # service restart: the SDK treats it as recoverable
                if event.type == "response.done":
                    break
        assert seen["reconnects"] >= 1 and kicked
        assert text == reference and dup == 0


async def test_slow_consumer_is_dropped_and_resumes_losslessly(server_factory):
    import base64
    import os
    import socket

    # Wide tokens, so the response (~2.4 MB) is far more than what the kernel buffers on both ends
    # (the server's send buffer bounded to 64 KiB) and the 64 events of lag allowed, whatever the
    # box's speed, yet cheap to decode and schedule
    width, tokens = 8_000, 300

    class WideFake(FakeBackend):
        def decode(self, ids):
            words = (FakeBackend.decode(self, [i]).strip() for i in ids)
            return "".join(" " + w * (width // len(w)) for w in words if w)

    fake = WideFake(answer_tokens=tokens, step_s=0.0001)
    conf = {
        "audio.enabled": False,
        "server.send_buffer_bytes": 64 * 1024,
        "limits.outbound_queue": 64,
        "limits.send_stall_s": 1.0,
        "limits.replay_max_events": 60000,
        "limits.replay_max_bytes": 64 * 1024 * 1024,
        "speculative.drafter": "none",
    }
    with server_factory(fake, **conf) as addr:
        host, port = addr.split(":")
        # a raw client with a tiny receive buffer that stops reading right after the handshake
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.connect((host, int(port)))
        key = base64.b64encode(os.urandom(16)).decode()
        raw.sendall(
            (
                f"GET /v1/realtime HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        raw.settimeout(10)
        head = raw.recv(4096)
        assert b" 101 " in head.split(b"\r\n")[0]
        token = addr.call(lambda: next(iter(addr.services.registry.sessions)))

        def frame(text: str) -> bytes:  # a masked client text frame
            data, mask = text.encode(), os.urandom(4)
            n = len(data)
            hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0xFE]) + n.to_bytes(2, "big"))
            return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))

        raw.sendall(
            frame(
                json.dumps(
                    {
                        "type": "conversation.item.create",
                        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                    }
                )
            )
        )
        raw.sendall(
            frame(
                json.dumps(
                    {
                        "type": "response.create",
                        "response": {
                            "max_output_tokens": tokens,
                            "scheduler": {"strategy": "fast", "min_chunk_tokens": 1, "max_chunk_tokens": 1},
                        },
                    }
                )
            )
        )
        other = await websockets.connect(f"ws://{addr}/v1/realtime")  # an unaffected neighbour
        await other.recv()

        def attached() -> bool:
            live = addr.services.registry.sessions.get(token)
            return live is not None and live.attached is not None

        deadline = time.monotonic() + 60  # the server drops the socket that stopped reading, keeps the session
        while addr.call(attached) and time.monotonic() < deadline:  # noqa: ASYNC110 (server-side state)
            await asyncio.sleep(0.05)
        assert not addr.call(attached) and addr.call(lambda: token in addr.services.registry.sessions)
        raw.close()
        await other.send(json.dumps({"type": "session.update", "session": {"instructions": "hi"}}))
        assert json.loads(await asyncio.wait_for(other.recv(), 30))["type"] == "session.updated"
        resumed = await websockets.connect(
            f"ws://{addr}/v1/realtime?resume_token={token}&last_seq=-1", max_size=None, open_timeout=60
        )
        assert json.loads(await resumed.recv())["type"] == "session.resumed"
        seq = -1
        while True:
            ev = json.loads(await asyncio.wait_for(resumed.recv(), 60))
            assert ev["seq"] == seq + 1  # from the very first event, nothing lost
            seq = ev["seq"]
            if ev["type"] == "response.done":
                break
        assert ev["response"]["usage"]["output_tokens"] == tokens
        await resumed.close()
        await other.close()


async def test_shutdown_drains_running_responses_then_closes_1012(server_factory):
    fake = FakeBackend(answer_tokens=80, step_s=0.01)
    with server_factory(fake, **{"audio.enabled": False, "server.shutdown_timeout_s": 10}) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime")
        await ws.recv()
        await ws.send(
            json.dumps(
                {
                    "type": "conversation.item.create",
                    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                }
            )
        )
        await ws.send(json.dumps({"type": "response.create"}))
        while json.loads(await ws.recv())["type"] != "response.output_text.delta":
            pass
        addr.server.should_exit = True  # what uvicorn's SIGTERM handler does
        done, code = None, None
        try:
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 20))
                if ev["type"] == "response.done":
                    done = ev
        except websockets.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else None
        assert done is not None and done["response"]["status"] == "completed"  # finished, not cut
        assert code == 1012
