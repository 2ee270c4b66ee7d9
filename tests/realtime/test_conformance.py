"""Conformance: scripted sessions whose every event is checked against the pinned ``openai`` SDK's own types.

Each server event must validate as ``openai.types.realtime.RealtimeServerEvent`` (what the Python Agents SDK
does before it acts on one: an event that fails is dropped); every client event a script sends is first
validated as ``RealtimeClientEvent``, so the server is shown to accept the SDK's shapes. Our extension
events (docs/PROTOCOL.md, "Extensions"; ``server_events.EXTENSION_TYPES``) appear only when asked for.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from openai.types.realtime import RealtimeClientEvent
from pydantic import TypeAdapter

from tests.conftest import requires_espeak
from tests.sdk_events import conform
from tests.wsclient import RealtimeClient

CLIENT_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeClientEvent)

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    }
]


class Script:
    """A raw WebSocket client whose sends are SDK-shaped (checked) unless marked as deliberate bad input."""

    def __init__(self, c: RealtimeClient):
        self.c = c

    async def send(self, event: dict[str, Any], bad: bool = False) -> None:
        if not bad:
            CLIENT_EVENT.validate_python(event)
        await self.c.send(event)

    async def until(self, type_: str) -> dict[str, Any]:
        return await self.c.until(type_)

    async def update_session(self, session: dict[str, Any]) -> dict[str, Any]:
        await self.send({"type": "session.update", "session": session})
        return await self.until("session.updated")

    async def say(self, text: str, event_id: str | None = None) -> dict[str, Any]:
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        extra = {"event_id": event_id} if event_id else {}
        await self.send({"type": "conversation.item.create", "item": item, **extra})
        return await self.until("conversation.item.done")


def _of(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


async def test_text_tools_cancel_items_errors_and_resume_conform(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False}) as addr:
        c = await RealtimeClient.connect(addr)
        s = Script(c)
        created = await s.until("session.created")
        # what the Agents SDK sends: tracing, prompt-less GA session fields, then tools
        await s.update_session({"type": "realtime", "tracing": "auto"})
        await s.update_session(
            {"type": "realtime", "output_modalities": ["text"], "tools": TOOLS, "tool_choice": "auto"}
        )

        # a text turn
        user = await s.say("Hello there")
        await s.send({"type": "response.create", "response": {"max_output_tokens": 8}})
        done = (await s.until("response.done"))["response"]
        assert done["status"] in ("completed", "incomplete") and done["usage"]["output_tokens"] >= 1

        # out-of-band: its own input, metadata echoed, nothing enters the conversation
        inline = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Summarize."}]}
        oob = {"conversation": "none", "metadata": {"purpose": "summary"}, "input": [inline], "max_output_tokens": 4}
        await s.send({"type": "response.create", "response": oob})
        mark = len(c.events)
        side = (await s.until("response.done"))["response"]
        assert side["metadata"] == {"purpose": "summary"} and side["conversation_id"] is None
        assert not [e for e in c.events[mark:] if e["type"].startswith("conversation.")]

        # retrieve: the item as it stands
        await s.send({"type": "conversation.item.retrieve", "item_id": user["item"]["id"]})
        assert (await s.until("conversation.item.retrieved"))["item"]["id"] == user["item"]["id"]

        # a forced call: exactly one, no message; its output accepted at once, before response.done
        await s.say("Weather in Paris?")
        await s.send({"type": "response.create", "response": {"tool_choice": "required", "max_output_tokens": 120}})
        call = None
        while call is None:
            ev = await s.until("response.output_item.done")
            if ev["item"]["type"] == "function_call" and ev["item"]["status"] == "completed":
                call = ev["item"]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": '{"temp_c": 21}'}
        await s.send({"type": "conversation.item.create", "event_id": "out_1", "item": output})
        after = []
        while not _of(after, "response.done"):
            after.append(await c.recv())
        assert not [e for e in after if e["type"] == "error"], after  # the output was not refused
        rdone = _of(after, "response.done")[0]["response"]
        assert [o["type"] for o in rdone["output"]] == ["function_call"]
        if not _of(after, "conversation.item.done"):  # it may have been acknowledged after response.done
            await s.until("conversation.item.done")
        await s.send({"type": "response.create", "response": {"tool_choice": "none", "max_output_tokens": 8}})
        follow = (await s.until("response.done"))["response"]
        assert follow["status"] in ("completed", "incomplete")

        # cancel mid-response
        await s.say("Tell me a long story")
        await s.send({"type": "response.create", "response": {"max_output_tokens": 200}})
        rid = (await s.until("response.created"))["response"]["id"]
        await s.send({"type": "response.cancel", "response_id": rid})
        cancelled = (await s.until("response.done"))["response"]
        assert cancelled["status"] in ("cancelled", "completed", "incomplete")

        # delete and truncate
        await s.send({"type": "conversation.item.delete", "item_id": user["item"]["id"]})
        assert (await s.until("conversation.item.deleted"))["item_id"] == user["item"]["id"]
        # only a spoken assistant message can be truncated (tests/speech truncates one): a call is refused, by name
        await s.send(
            {"type": "conversation.item.truncate", "item_id": call["id"], "content_index": 0, "audio_end_ms": 0}
        )
        refused = (await s.until("error"))["error"]
        assert (refused["code"], refused["param"]) == ("invalid_value", "item_id"), refused

        # errors echo the client's event_id and name the field; the session goes on
        await s.send({"type": "conversation.item.retrieve", "item_id": "nope", "event_id": "ev_r"})
        err = (await s.until("error"))["error"]
        assert (err["code"], err["param"], err["event_id"]) == ("item_not_found", "item_id", "ev_r")
        await s.send({"type": "response.cancel", "event_id": "ev_c"})
        assert (await s.until("error"))["error"]["event_id"] == "ev_c"
        await s.send({"type": "no.such.event", "event_id": "ev_x"}, bad=True)
        err = (await s.until("error"))["error"]
        assert (err["code"], err["event_id"]) == ("invalid_event_type", "ev_x")
        await s.send({"type": "response.create", "event_id": "ev_t", "response": {"temperature": 9}}, bad=True)
        err = (await s.until("error"))["error"]
        assert err["event_id"] == "ev_t" and err["param"] == "response.temperature"

        # resume: the replayed events conform too
        token, last_seq = created["resume"]["token"], c.events[-1]["seq"]
        await c.ws.close()
        c2 = await RealtimeClient.connect(addr, f"model=tiny-llama&resume_token={token}&last_seq={last_seq - 3}")
        hello = await c2.recv()
        assert hello["type"] == "session.resumed"
        replayed = [await c2.recv() for _ in range(3)]
        assert [e["seq"] for e in replayed] == [last_seq - 2, last_seq - 1, last_seq]
        await Script(c2).say("still there?")
        await c2.close()
        seen = conform(c.events) + conform(c2.events)
        assert not any(t.startswith("response.image_generation_call.") for t in seen)  # no image was asked for
        assert seen.count("session.resumed") == 1


async def test_images_in_conform(tiny_backend, server_factory, tiny_clip_dir):
    from tests.media.test_realtime_images import data_url, vision

    with server_factory(tiny_backend, **vision(tiny_clip_dir)) as addr:
        c = await RealtimeClient.connect(addr)
        s = Script(c)
        await s.until("session.created")
        content = [{"type": "input_text", "text": "what is this?"}, {"type": "input_image", "image_url": data_url()}]
        item = {"type": "message", "role": "user", "content": content}
        await s.send({"type": "conversation.item.create", "item": item})
        await s.send({"type": "response.create", "response": {"max_output_tokens": 8}})
        await s.until("response.done")
        await c.close()
        conform(c.events)


def _vad(kind: str) -> dict[str, Any]:
    if kind == "semantic_vad":
        return {"type": "semantic_vad", "eagerness": "high", "create_response": True}
    return {"type": "server_vad", "silence_duration_ms": 500, "create_response": True}


@requires_espeak
@pytest.mark.parametrize("kind", ["server_vad", "semantic_vad"])
async def test_voice_turns_conform(tiny_backend, server_factory, kind):
    from testkit.espeak import silence, speak
    from tests.media.test_realtime_voice import pcm24, stream

    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        s = Script(c)
        await s.until("session.created")
        audio_in = {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": _vad(kind)}
        await s.update_session({"type": "realtime", "audio": {"input": audio_in}})
        audio = np.concatenate([silence(0.4), speak("Please open the kitchen window."), silence(2.5)])
        await stream(c, pcm24(audio), frame_ms=100)
        started = await s.until("input_audio_buffer.speech_started")
        completed = await s.until("conversation.item.input_audio_transcription.completed")
        assert completed["item_id"] == started["item_id"] and completed["usage"]["seconds"] > 0.5
        await s.until("response.done")
        await s.send({"type": "conversation.item.retrieve", "item_id": completed["item_id"]})
        item = (await s.until("conversation.item.retrieved"))["item"]
        assert item["content"][0]["transcript"] == completed["transcript"]
        await asyncio.wait_for(c.close(), 10)
        seen = conform(c.events)
        for t in ("input_audio_buffer.speech_stopped", "input_audio_buffer.committed", "conversation.item.added"):
            assert t in seen
