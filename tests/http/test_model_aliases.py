"""model.aliases: the OpenAI ids LiveKit/Pipecat default to are accepted where configured — in
/v1/models, Chat Completions' and Completions' ``model``, ``?model=`` and ``session.model`` — and
refused otherwise, with the same message everywhere."""

from __future__ import annotations

import asyncio
import json

import httpx
import websockets

from testkit.fake_backend import FakeBackend
from tests.http.helpers import assert_error, post, user

ALIASES = ["gpt-realtime", "gpt-4o-mini"]


async def models(addr: str):
    async with httpx.AsyncClient(timeout=10) as client:
        return (await client.get(f"http://{addr}/v1/models")).json()


async def recv(ws):
    return json.loads(await asyncio.wait_for(ws.recv(), 10))


async def test_configured_aliases_are_listed_and_accepted_everywhere(server_factory):
    fake = FakeBackend(answer_tokens=5)
    with server_factory(fake, **{"audio.enabled": False, "model.aliases": ALIASES}) as addr:
        ids = [m["id"] for m in (await models(addr))["data"]]
        assert ids == ["fake", *ALIASES]
        r = await asyncio.to_thread(post, addr, {"model": "gpt-4o-mini", "messages": user("hi")})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
        assert_error(
            await asyncio.to_thread(post, addr, {"model": "gpt-5", "messages": user("hi")}), 404, "model_not_found"
        )
        async with httpx.AsyncClient(timeout=30) as client:
            text = f"http://{addr}/v1/completions"
            ok = await client.post(text, json={"model": "gpt-4o-mini", "prompt": "hi", "max_tokens": 2})
            bad = await client.post(text, json={"model": "gpt-5", "prompt": "hi", "max_tokens": 2})
        assert ok.status_code == 200 and ok.json()["choices"][0]["text"]
        assert_error(bad, 404, "model_not_found")
        assert "'fake', 'gpt-realtime', 'gpt-4o-mini'" in bad.json()["error"]["message"]  # what is served instead
        async with websockets.connect(f"ws://{addr}/v1/realtime?model=gpt-realtime") as ws:
            assert (await recv(ws))["type"] == "session.created"
            await ws.send(json.dumps({"type": "session.update", "session": {"model": "gpt-realtime"}}))
            updated = await recv(ws)
            assert updated["type"] == "session.updated" and updated["session"]["model"] == "gpt-realtime"
            await ws.send(json.dumps({"type": "session.update", "session": {"model": "gpt-5"}}))
            assert (await recv(ws))["error"]["code"] == "model_not_found"


async def test_strict_by_default_openai_ids_are_model_not_found(server_factory):
    with server_factory(FakeBackend(answer_tokens=5), **{"audio.enabled": False}) as addr:
        ids = [m["id"] for m in (await models(addr))["data"]]
        assert ids == ["fake"]
        assert_error(
            await asyncio.to_thread(post, addr, {"model": "gpt-realtime", "messages": user("hi")}),
            404,
            "model_not_found",
        )
        async with websockets.connect(f"ws://{addr}/v1/realtime?model=gpt-realtime") as ws:
            assert (await recv(ws))["error"]["code"] == "model_not_found"
            await asyncio.wait_for(ws.wait_closed(), 10)
            assert ws.close_code == 1008
