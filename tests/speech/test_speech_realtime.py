"""Spoken replies over /v1/realtime: a real uvicorn, the real Piper voice, a fake model that answers
in words (testkit.fake_backend: "alpha bravo …").

Every server event is checked against the openai SDK's own ``RealtimeServerEvent`` models."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np

from processors.audio_formats import g711_to_pcm16
from testkit.fake_backend import FakeBackend
from tests.sdk_events import SERVER_EVENT
from tests.wsclient import RealtimeClient

STEADY = {"speculative.drafter": "none", "audio.enabled": False}


def audio_of(c: RealtimeClient, rid: str) -> bytes:
    return b"".join(
        base64.b64decode(e["delta"])
        for e in c.events
        if e["type"] == "response.output_audio.delta" and e["response_id"] == rid
    )


async def speaking_session(addr: str, **output: Any) -> RealtimeClient:
    c = await RealtimeClient.connect(addr, query="")
    await c.until("session.created")
    session: dict[str, Any] = {"type": "realtime", "output_modalities": ["audio"]}
    if output:
        session["audio"] = {"output": output}
    upd = await c.update_session(session)
    assert upd["session"]["output_modalities"] == ["audio"]
    return c


async def test_a_reply_is_spoken_with_its_transcript(server_factory):
    with server_factory(FakeBackend(answer_tokens=40, step_s=0.005), **STEADY) as addr:
        c = await speaking_session(addr, voice="ash")
        done = await c.ask("say something", max_output_tokens=24)
        for e in c.events:
            SERVER_EVENT.validate_python(e)
        r = done["response"]
        audio = audio_of(c, r["id"])
        assert len(audio) > 4800 and len(audio) % 2 == 0  # > 0.1 s of 24 kHz pcm16
        pcm = np.frombuffer(audio, dtype="<i2")
        assert np.abs(pcm).max() > 1000  # a voice, not silence
        types = [e["type"] for e in c.events]
        assert "response.output_text.delta" not in types
        deltas = "".join(e["delta"] for e in c.events if e["type"] == "response.output_audio_transcript.delta")
        done_tr = next(e for e in c.events if e["type"] == "response.output_audio_transcript.done")
        assert done_tr["transcript"] == deltas
        assert types.index("response.output_audio.done") < types.index("response.done")
        assert r["output"][0]["content"][0] == {"type": "output_audio", "transcript": deltas}
        details = r["usage"]["output_token_details"]
        assert details["audio_tokens"] >= len(audio) / 48_000 * 20 - 1
        assert await asyncio.to_thread(first_chunks_timed, addr) >= 1  # /metrics: the first chunk's stage
        await c.close()


def first_chunks_timed(addr: str) -> float:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://{addr}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "stream_omni:voice_stage_seconds_count" and s.labels.get("stage") == "tts_first_chunk":
                return s.value
    return 0.0


async def test_g711_output_is_8khz_one_byte_per_sample(server_factory):
    with server_factory(FakeBackend(answer_tokens=40, step_s=0.005), **STEADY) as addr:
        c = await speaking_session(addr, format={"type": "audio/pcmu"})
        created_view = next(e for e in c.events if e["type"] == "session.updated")["session"]
        assert created_view["audio"]["output"]["format"] == {"type": "audio/pcmu"}
        done = await c.ask("hello", max_output_tokens=16)
        ulaw = audio_of(c, done["response"]["id"])
        assert ulaw
        pcm = np.frombuffer(g711_to_pcm16(ulaw, "audio/pcmu"), dtype="<i2")
        assert np.abs(pcm).max() > 1000
        await c.close()


async def test_cancel_stops_audio_at_once_and_truncate_cuts_to_what_was_heard(server_factory):
    with server_factory(FakeBackend(answer_tokens=40, step_s=0.005), **STEADY) as addr:
        c = await speaking_session(addr)
        await c.say("tell a long story")
        await c.send({"type": "response.create", "response": {"max_output_tokens": 300}})
        first = await c.until("response.output_audio.delta")
        await c.send({"type": "response.cancel"})
        done = await c.until("response.done")
        assert done["response"]["status"] == "cancelled"
        rid = first["response_id"]
        try:  # nothing of it after response.done
            while True:
                ev = await c.recv(timeout=0.5)
                assert ev.get("response_id") != rid, ev["type"]
        except TimeoutError:
            pass
        item = done["response"]["output"][0]
        said = item["content"][0]["transcript"]
        sent_ms = len(audio_of(c, rid)) / 48
        await c.send(
            {
                "type": "conversation.item.truncate",
                "item_id": item["id"],
                "content_index": 0,
                "audio_end_ms": 10_000_000,
            }
        )
        err = await c.until("error")
        assert err["error"]["param"] == "audio_end_ms"
        await c.send(
            {"type": "conversation.item.truncate", "item_id": item["id"], "content_index": 0, "audio_end_ms": 0}
        )
        tr = await c.until("conversation.item.truncated")
        SERVER_EVENT.validate_python(tr)
        assert tr["audio_end_ms"] == 0 and sent_ms > 0 and said
        # the conversation now holds only what was heard (nothing, at 0 ms): so does the next prompt's context
        token = c.events[0]["resume"]["token"]
        messages = addr.call(lambda: addr.services.registry.sessions[token].session.messages())
        assert messages[-1] == {"role": "assistant", "content": ""}
        assert said not in str(messages)
        await c.close()


async def test_audio_deltas_replay_on_resume(server_factory):
    with server_factory(FakeBackend(answer_tokens=40, step_s=0.005), **STEADY) as addr:
        c = await speaking_session(addr)
        created = c.events[0]
        token = created["resume"]["token"]
        done = await c.ask("hi", max_output_tokens=12)
        rid = done["response"]["id"]
        first_audio = next(e for e in c.events if e["type"] == "response.output_audio.delta")
        await c.ws.close()
        r = await RealtimeClient.connect(addr, query=f"resume_token={token}&last_seq={first_audio['seq'] - 1}")
        hello = await r.recv()
        assert hello["type"] == "session.resumed"
        await r.until("response.done", timeout=30)
        assert audio_of(r, rid) == audio_of(c, rid)
        await r.close()


async def test_bad_formats_are_refused_naming_the_field(server_factory):
    with server_factory(FakeBackend(answer_tokens=40, step_s=0.005), **STEADY) as addr:
        c = await RealtimeClient.connect(addr, query="")
        await c.until("session.created")
        await c.ws.send(
            json.dumps({"type": "session.update", "session": {"audio": {"output": {"format": {"type": "audio/mp3"}}}}})
        )
        err = await c.until("error")
        assert err["error"]["param"] == "session.audio.output.format.type"
        await c.send({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/wav"}}}}})
        err = await c.until("error")
        assert err["error"]["param"] == "session.audio.input.format.type"
        await asyncio.wait_for(c.close(), 5)
