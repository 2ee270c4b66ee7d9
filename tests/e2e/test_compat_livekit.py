"""LiveKit Agents 1.8.9 (livekit-plugins-openai RealtimeModel), unmodified, against a real server.

LiveKit matches each response.create to its reply through response.metadata.client_event_id: before
the server echoed metadata, generate_reply() timed out after 10 s and AgentSession.run() failed.
The client defaults to OpenAI's model id, so the server serves it as an alias (model.aliases).
Skipped only where the library is not installed locally; in CI (CI set) a missing library fails.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from typing import Any

import numpy as np
import pytest

from testkit.fake_backend import FakeBackend
from testkit.recording import Recording
from tests.conftest import requires_espeak

HAVE_LIVEKIT = importlib.util.find_spec("livekit.plugins.openai") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_LIVEKIT and not os.environ.get("CI"),
    reason="livekit-agents / livekit-plugins-openai not installed (pip install -e '.[test]')",
)

CONF = {"audio.enabled": False, "model.aliases": ["gpt-realtime"]}


def realtime_model(addr: str, http: Any) -> Any:
    from livekit.plugins import openai as lk_openai

    return lk_openai.realtime.RealtimeModel(
        base_url=f"http://{addr}/v1", api_key="unused", modalities=["text"], http_session=http
    )


async def collect(gen: Any) -> str:
    text = ""
    async for msg in gen.message_stream:
        async for chunk in msg.text_stream:
            text += chunk
    return text


async def test_generate_reply_resolves_with_our_reply(server_factory):
    import aiohttp

    with server_factory(FakeBackend(answer_tokens=20, step_s=0.001), **CONF) as addr:
        async with aiohttp.ClientSession() as http:
            model = realtime_model(addr, http)
            sess = model.session()
            try:
                gen = await asyncio.wait_for(sess.generate_reply(instructions="say hi"), 9)  # LiveKit's own: 10 s
                text = await asyncio.wait_for(collect(gen), 20)
                again = await asyncio.wait_for(sess.generate_reply(instructions="again"), 9)
                assert await asyncio.wait_for(collect(again), 20)
            finally:
                await sess.aclose()
                await model.aclose()
    assert text.strip() and set(text.replace(".", " ").split()) <= _words()  # the fake model's words


def _words() -> set[str]:
    from testkit.fake_backend import WORDS

    return set(WORDS)


async def test_agent_session_run_resolves_with_our_reply(server_factory):
    import aiohttp
    from livekit.agents import Agent, AgentSession

    with server_factory(FakeBackend(answer_tokens=20, step_s=0.001), **CONF) as addr:
        async with aiohttp.ClientSession() as http:
            async with AgentSession(llm=realtime_model(addr, http)) as session:
                await session.start(Agent(instructions="be brief"))
                result = await asyncio.wait_for(session.run(user_input="hello"), 30)
    replies = [ev.item for ev in result.events if type(ev).__name__ == "ChatMessageEvent"]
    assert replies and replies[-1].role == "assistant"
    assert set((replies[-1].text_content or "").replace(".", " ").split()) <= _words()
    assert (replies[-1].text_content or "").strip()


async def test_interrupt_cancels_the_running_reply(server_factory):
    import aiohttp

    fake = FakeBackend(answer_tokens=100_000, step_s=0.002)  # would run for minutes
    with server_factory(fake, **{**CONF, "session.max_output_tokens": 100_000}) as addr:
        async with aiohttp.ClientSession() as http:
            model = realtime_model(addr, http)
            sess = model.session()
            try:
                gen = await asyncio.wait_for(sess.generate_reply(), 9)
                stream = gen.message_stream.__aiter__()
                msg = await asyncio.wait_for(stream.__anext__(), 10)
                chunks = msg.text_stream.__aiter__()
                assert await asyncio.wait_for(chunks.__anext__(), 10)  # it is generating
                sess.interrupt()  # response.cancel
                rest = ""
                async with asyncio.timeout(10):  # the text stream ends: response.done (cancelled) came
                    async for chunk in chunks:
                        rest += chunk
            finally:
                await sess.aclose()
                await model.aclose()
        busy = addr.call(lambda: addr.services.registry.busy())
    assert busy == 0  # the engine job was cancelled, not left running


@pytest.mark.real_model
async def test_function_tool_round_trip_with_a_forced_call(real_backend, server_factory):
    """An Agent's @function_tool, forced with LiveKit's own RealtimeModel(tool_choice="required").

    The embedded SmolLM2 decides on its own whether to call a tool; a LiveKit user who needs the call forces it,
    and the server decodes it under the tools' grammar. LiveKit then runs the tool, sends its output and asks for
    the reply with tool_choice "auto" (its own rule after a tool), so the round trip ends in the model's text.
    """
    import aiohttp
    from livekit.agents import Agent, AgentSession, function_tool
    from livekit.plugins import openai as lk_openai

    cities: list[str] = []

    class Weather(Agent):
        def __init__(self) -> None:
            super().__init__(instructions="You are a weather assistant. Be brief.")

        @function_tool
        async def get_weather(self, city: str) -> str:
            """Current weather of a city."""
            cities.append(city)
            return f"sunny, 21 degrees in {city}"

    model = Recording(real_backend)
    with server_factory(model, **{**CONF, "session.max_output_tokens": 60}) as addr:
        async with aiohttp.ClientSession() as http:
            llm = lk_openai.realtime.RealtimeModel(
                base_url=f"http://{addr}/v1",
                api_key="unused",
                modalities=["text"],
                http_session=http,
                tool_choice="required",
            )
            async with AgentSession(llm=llm) as session:
                await session.start(Weather())
                result = await asyncio.wait_for(session.run(user_input="What is the weather in Paris?"), 180)
    kinds = [type(ev).__name__ for ev in result.events]
    assert kinds[:2] == ["FunctionCallEvent", "FunctionCallOutputEvent"], kinds
    call, output = result.events[0].item, result.events[1].item
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": cities[0]}  # the grammar's shape
    assert output.call_id == call.call_id and output.output == f"sunny, 21 degrees in {cities[0]}"
    assert kinds[-1] == "ChatMessageEvent" and result.events[-1].item.role == "assistant"
    assert (result.events[-1].item.text_content or "").strip()  # the reply after the tool (the model's words)
    # the tool's output reached the model: a prompt after the first call carries it
    assert any(output.output in m["content"] for p in model.prompts[1:] for m in p), model.prompts[-1]


@requires_espeak
async def test_voice_turn_pushed_as_audio_frames(tiny_backend, server_factory):
    """RealtimeSession.push_audio() needs no room: rtc.AudioFrames of espeak-ng speech → server VAD (LiveKit asks
    for semantic_vad, run as server_vad), Whisper, and a reply the server starts itself."""
    import aiohttp
    from livekit import rtc

    from processors.asr import word_error_rate
    from processors.audio import float32_to_pcm16
    from testkit.espeak import silence, speak

    sentence = "Please open the kitchen window."
    with server_factory(tiny_backend, **{**CONF, "audio.enabled": True, "session.max_output_tokens": 8}) as addr:
        async with aiohttp.ClientSession() as http:
            model = realtime_model(addr, http)
            sess = model.session()
            heard: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            replies: asyncio.Queue[Any] = asyncio.Queue()
            sess.on("generation_created", replies.put_nowait)
            sess.on(
                "input_audio_transcription_completed",
                lambda ev: ev.is_final and not heard.done() and heard.set_result(ev.transcript),
            )
            try:
                audio = np.concatenate([silence(0.5, 24_000), speak(sentence, 24_000), silence(1.2, 24_000)])
                pcm = float32_to_pcm16(audio)
                step = 24_000 * 2 // 50  # 20 ms frames, as a room's audio stream gives them
                for i in range(0, len(pcm), step):
                    chunk = pcm[i : i + step]
                    sess.push_audio(rtc.AudioFrame(chunk, 24_000, 1, len(chunk) // 2))
                transcript = await asyncio.wait_for(heard, 60)
                gen = await asyncio.wait_for(replies.get(), 30)
                await asyncio.wait_for(collect(gen), 30)  # the reply's text stream ends: response.done came
            finally:
                await sess.aclose()
                await model.aclose()
    assert word_error_rate(sentence, transcript) <= 0.25, transcript
    assert not gen.user_initiated  # the server's turn detection started it, not a generate_reply()
