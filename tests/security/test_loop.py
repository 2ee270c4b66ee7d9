"""No input blocks the event loop — templating and tokenization run off it, and item
text and instructions are capped so that what echoes them always fits the replay buffer."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest
import websockets

from gateway.core.config import ConfigError, load_config
from testkit.fake_backend import FakeBackend

from .conftest import health_latency

NO_AUDIO = {"audio.enabled": False}


class BlockedTokenizer(FakeBackend):
    """``chat_tokens`` blocks (as a huge prompt would) until the test releases it."""

    def __init__(self) -> None:
        super().__init__(answer_tokens=5)
        self.entered = threading.Event()
        self.release = threading.Event()

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        self.entered.set()
        self.release.wait(20)
        return super().chat_tokens(messages, add_generation_prompt)


async def _recv_until(ws: websockets.ClientConnection, type_: str, timeout: float = 10) -> dict:  # noqa: ASYNC109
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), max(0.01, deadline - loop.time())))
        if ev["type"] == type_:
            return ev


async def _wait(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 10)


def _say(text: str) -> str:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return json.dumps({"type": "conversation.item.create", "item": item})


@pytest.mark.server
async def test_realtime_tokenization_leaves_the_loop_free():
    from testkit.live_server import run_server

    backend = BlockedTokenizer()
    with run_server(load_config(None, **NO_AUDIO), backend) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=5)
        await _recv_until(ws, "session.created")
        await ws.send(_say("hello there"))
        await ws.send('{"type": "response.create"}')
        await _wait(backend.entered)
        # the tokenizer is stuck: if it ran on the loop, neither of these could answer
        await asyncio.to_thread(health_latency, addr, 5)
        await ws.send('{"type": "session.update", "session": {"temperature": 0.5}}')
        await _recv_until(ws, "session.updated", 5)
        backend.release.set()
        done = await _recv_until(ws, "response.done")
        assert done["response"]["status"] == "completed"
        await ws.close()


@pytest.mark.server
async def test_a_response_cancelled_while_tokenizing_never_reaches_the_engine():
    from testkit.live_server import run_server

    backend = BlockedTokenizer()
    with run_server(load_config(None, **NO_AUDIO), backend) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=5)
        await _recv_until(ws, "session.created")
        await ws.send(_say("hello"))
        await ws.send('{"type": "response.create"}')
        await _wait(backend.entered)
        await ws.send('{"type": "response.cancel"}')
        done = await _recv_until(ws, "response.done")
        assert done["response"]["status"] == "cancelled"
        backend.release.set()
        await ws.send(_say("again"))  # the session goes on: a new response runs normally
        await ws.send('{"type": "response.create"}')
        assert (await _recv_until(ws, "response.done"))["response"]["status"] == "completed"
        await ws.close()
        assert addr.call(lambda: addr.services.engine.depth) == (0, 0)


@pytest.mark.server
def test_http_tokenization_leaves_the_loop_free():
    from testkit.live_server import run_server

    backend = BlockedTokenizer()
    with run_server(load_config(None, **NO_AUDIO), backend) as addr:
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        with httpx.Client(timeout=15) as client:
            result: list[httpx.Response] = []
            t = threading.Thread(
                target=lambda: result.append(client.post(f"http://{addr}/v1/chat/completions", json=body))
            )
            t.start()
            assert backend.entered.wait(10)
            health_latency(addr, 5)
            backend.release.set()
            t.join(15)
        assert result and result[0].status_code == 200


async def test_oversize_item_and_instructions_are_refused_and_the_session_goes_on(fake, server_factory):
    limits = {**NO_AUDIO, "limits.max_item_text_chars": 1000, "limits.max_instructions_chars": 500}
    with server_factory(fake, **limits) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=5)
        await _recv_until(ws, "session.created")
        two_parts = {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "x" * 600}, {"type": "input_text", "text": "y" * 600}],
            },
        }
        for frame in (
            json.dumps(two_parts),
            json.dumps({"type": "session.update", "session": {"instructions": "z" * 501}}),
            json.dumps({"type": "response.create", "response": {"instructions": "z" * 501}}),
        ):
            await ws.send(frame)
            err = (await _recv_until(ws, "error", 5))["error"]
            assert err["code"] == "input_too_large" and "limit" in err["message"], err
        await ws.send(_say("w " * 400))  # 800 characters: under the cap
        await _recv_until(ws, "conversation.item.done", 5)
        await ws.send('{"type": "response.create"}')
        assert (await _recv_until(ws, "response.done"))["response"]["status"] == "completed"
        await ws.close()


async def test_an_item_at_the_cap_leaves_the_session_resumable(fake, server_factory):
    """The worst case for the replay buffer (control characters escape to 6 bytes) still resumes from seq 0."""
    limits = {
        **NO_AUDIO,
        "limits.max_item_text_chars": 20_000,
        "limits.max_instructions_chars": 20_000,
        "limits.replay_max_bytes": 12 * 20_000 + 64 * 1024,
    }
    with server_factory(fake, **limits) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=5, max_size=None)
        token = (await _recv_until(ws, "session.created"))["resume"]["token"]
        await ws.send(_say("\x01" * 20_000))
        await _recv_until(ws, "conversation.item.done", 5)
        await ws.close()
        again = await websockets.connect(
            f"ws://{addr}/v1/realtime?resume_token={token}&last_seq=0", open_timeout=5, max_size=None
        )
        assert json.loads(await asyncio.wait_for(again.recv(), 5))["type"] == "session.resumed"
        await _recv_until(again, "conversation.item.done", 5)
        await again.close()


def test_caps_that_do_not_fit_the_replay_buffer_are_a_config_error():
    with pytest.raises(ConfigError, match="replay_max_bytes"):
        load_config(None, **{"limits.replay_max_bytes": 1_000_000, "limits.max_item_text_chars": 100_000})
    with pytest.raises(ConfigError, match="replay_max_bytes"):
        load_config(None, **{"limits.replay_max_bytes": 1_000_000, "limits.max_instructions_chars": 200_000})
