"""backend: openai in front of llama.cpp's C++ ``llama-server`` (real parallel slots): a cancelled
response frees the engine's slot: llama-server's /slots shows it idle again.

Optional: llama-server is a benchmark peer, not a test dependency, and CI does not build it. These
tests run where a binary is found (``$LLAMA_SERVER``, PATH, ``~/.cache/llama-bin/llama-server``)
and skip, saying so, elsewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.remote_engines import EngineProcess, cpp_llama_server, gateway, llama_server_bin, slots
from tests.engine.test_remote import LONG, connect, direct, user, wait_for

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.server,
    pytest.mark.skipif(
        llama_server_bin() is None,
        reason="llama.cpp's llama-server binary not found ($LLAMA_SERVER, PATH or ~/.cache/llama-bin/llama-server); "
        "it is a benchmark peer that CI does not build",
    ),
]

MAX = 600  # far more than a cancel at the first delta lets it decode (the session caps it at 512)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    e = cpp_llama_server(tmp_path_factory.mktemp("cpp_llama_server"), parallel=2).start()
    yield e
    e.stop()


def busy(engine: EngineProcess) -> list[dict[str, Any]]:
    return [s for s in slots(engine) if s["is_processing"]]


async def test_a_turn_through_llama_server_is_the_engines_own_answer(engine):
    with gateway(engine.base_url, **{"model.extra_body": {"cache_prompt": True}}) as addr:
        c = await connect(addr, "smollm2-engine")  # model: auto = llama-server's --alias
        done = await c.ask("Name three colors.", max_output_tokens=24)
        assert done["response"]["status"] in ("completed", "incomplete")
        want = direct(engine.base_url, user("Name three colors."), max_tokens=24, temperature=0.0, top_p=1.0)
        assert c.text_of(done["response"]["id"]) == want["choices"][0]["message"]["content"]
        # llama-server sends the usage chunk that stream_options asks for: the engine's own counts
        assert done["response"]["usage"]["output_tokens"] == want["usage"]["completion_tokens"]
        await c.close()


async def test_cancel_frees_the_llama_server_slot(engine):
    assert busy(engine) == []
    with gateway(engine.base_url) as addr:
        c = await connect(addr, "smollm2-engine")
        await c.say(LONG)
        body = {"max_output_tokens": MAX, "temperature": 0.0, "scheduler": {"strategy": "fast"}}
        await c.send({"type": "response.create", "response": body})
        await c.until("response.output_text.delta")
        working = busy(engine)
        assert len(working) == 1  # one slot decodes our response
        sid, task = working[0]["id"], working[0]["id_task"]
        assert working[0]["next_token"][0]["has_next_token"] is True
        await c.send({"type": "response.cancel"})
        done = await c.until("response.done", timeout=10)
        assert done["response"]["status"] == "cancelled"
        # the engine saw the connection close and released the slot mid-task: llama-server leaves
        # has_next_token true on a task it stopped early, false on one that ran to its end (eos or the
        # token cap), so a slot that merely finished the response later would fail here too
        await asyncio.to_thread(wait_for, lambda: busy(engine) == [], 10.0, "the slot to go idle")
        slot = next(s for s in slots(engine) if s["id"] == sid)
        assert slot["id_task"] == task and slot["next_token"][0]["has_next_token"] is True, slot
        done = await c.ask("Say hi.", max_output_tokens=8)  # the session goes on
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()
