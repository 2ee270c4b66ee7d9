"""The OpenAI Agents SDK for Python (``RealtimeRunner``, unmodified, its default audio output) against
a real server: a spoken answer with its transcript, then an interrupt that truncates it."""

from __future__ import annotations

import asyncio
from typing import Any

from testkit.fake_backend import FakeBackend


async def test_agents_sdk_hears_a_spoken_answer_and_interrupts_it(server_factory):
    from agents.realtime import RealtimeAgent, RealtimeRunner

    fake = FakeBackend(answer_tokens=80, step_s=0.01)
    with server_factory(fake, **{"audio.enabled": False}) as addr:
        agent = RealtimeAgent(name="assistant", instructions="Answer briefly.")
        # the SDK's own default session: output_modalities ["audio"], voice "ash", pcm 24 kHz
        runner = RealtimeRunner(starting_agent=agent, config={"model_settings": {"model_name": "fake"}})
        session = await runner.run(model_config={"url": f"ws://{addr}/v1/realtime", "api_key": "local"})
        audio_bytes, errors, server_events = 0, [], []
        truncated: dict[str, Any] = {}
        async with session:
            await session.send_message("Tell me a story")

            async def consume() -> None:
                nonlocal audio_bytes
                async for ev in session:
                    if ev.type == "audio":
                        audio_bytes += len(ev.audio.data)
                        if audio_bytes >= 48_000 and not truncated.get("asked"):  # ≥ 1 s heard: interrupt
                            truncated["asked"] = True
                            await session.interrupt()
                    elif ev.type == "error":
                        errors.append(ev.error)
                    elif ev.type == "raw_model_event" and ev.data.type == "raw_server_event":
                        server_events.append(ev.data.data)
                        if ev.data.data["type"] == "conversation.item.truncated":
                            truncated["event"] = ev.data.data
                            return

            await asyncio.wait_for(consume(), 60)
        types = [e["type"] for e in server_events]
        assert "response.output_audio.delta" in types and "response.output_audio_transcript.delta" in types
        done = next(e for e in server_events if e["type"] == "response.done")
        assert done["response"]["status"] == "cancelled"
        heard_ms = truncated["event"]["audio_end_ms"]
        assert 0 < heard_ms <= audio_bytes / 48
        # every event parsed under the SDK's own openai models (a failure surfaces as an error event);
        # the SDK's conversation.item.retrieve is answered elsewhere (GA conformance), so its
        # invalid_event_type, if any, is the one error allowed here
        assert all(getattr(e, "code", None) == "invalid_event_type" for e in errors), errors
