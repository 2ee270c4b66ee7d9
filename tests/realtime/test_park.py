"""A session whose socket drops parks its llama.cpp slot (``LiveSession.park``): the slot keeps
its cache for a resume, and new conversations may take it before a free slot that would decode
apart from the others (models.llama_slots.pick_slot). Real uvicorn, real WebSocket, embedded GGUF."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import websockets

from gateway.core.config import load_config
from testkit.live_server import run_server

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'stream-omni[llama]')")

from models.llama_cpp import LlamaCppBackend, LlamaCppConfig  # noqa: E402

pytestmark = [pytest.mark.real_model, pytest.mark.server]


@pytest.fixture(scope="module")
def backend() -> Iterator[LlamaCppBackend]:
    b = LlamaCppBackend(LlamaCppConfig(threads=2, n_ctx=512, n_seq=4))
    yield b
    b.close()


async def one_turn(addr: str) -> None:
    async with websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=30) as ws:

        async def recv() -> dict[str, Any]:
            return json.loads(await asyncio.wait_for(ws.recv(), 60))

        assert (await recv())["type"] == "session.created"
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 4}}))
        while (await recv())["type"] != "response.done":
            pass


def slots(addr: Any, backend: LlamaCppBackend) -> list[tuple[bool, bool, int]]:
    """(owned, parked, cached tokens) of every slot, read on the engine thread."""
    fut = addr.services.engine.call(lambda: [(not s.free(), s.parked, len(s.tokens)) for s in backend._slots])
    return list(fut.result(10))


def test_a_dropped_session_parks_its_slot_and_keeps_its_cache(backend: LlamaCppBackend) -> None:
    conf = load_config(None, **{"audio.enabled": False, "server.grace_period_s": 60})
    with run_server(conf, backend) as addr:
        asyncio.run(one_turn(addr))
        deadline = time.monotonic() + 30  # the server sees the close, then the engine parks it
        now = slots(addr, backend)
        while not any(parked for _, parked, _ in now):
            assert time.monotonic() < deadline, now
            now = slots(addr, backend)
        owned, parked, cached = next(s for s in now if s[1])
        assert owned and cached > 0  # still its session's (a resume goes on there), cache intact
        assert sum(1 for s in now if s[1]) == 1
