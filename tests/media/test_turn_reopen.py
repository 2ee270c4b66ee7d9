"""A turn reopens over a real server: espeak-ng speech, silero VAD and Whisper, a real WebSocket.

The user pauses mid-sentence long enough for the turn to end, and goes on before any of the reply
was heard: the reply is cancelled, the first item leaves the conversation, and one turn holding the
whole sentence is answered. The VAD runs on the audio clock, so the pause is a fact of the audio
streamed; the fake LLM is slow enough (a second per step) that its reply is still silent then.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from tests.conftest import requires_espeak
from tests.http.test_metrics import scrape, value
from tests.media.test_realtime_voice import pcm24, stream
from tests.wsclient import RealtimeClient

pytestmark = [requires_espeak, pytest.mark.real_model]

FIRST, REST = "Please book a table", "for two people tonight."


async def session(addr: str, reopen_ms: int) -> RealtimeClient:
    c = await RealtimeClient.connect(addr, query="")
    await c.until("session.created")
    td = {"type": "server_vad", "silence_duration_ms": 500, "transcription_interval_ms": 0, "reopen_ms": reopen_ms}
    await c.update_session({"audio": {"input": {"turn_detection": td}}, "output_modalities": ["text"]})
    return c


async def pause_then_go_on(c: RealtimeClient) -> dict:
    """The first half, a pause that ends the turn, then (its reply created, still silent) the rest."""
    await stream(c, pcm24(np.concatenate([silence(0.3), speak(FIRST), silence(0.8)])))
    first = await c.until("conversation.item.input_audio_transcription.completed")
    await c.until("response.created")
    assert "response.output_text.delta" not in [e["type"] for e in c.events]  # nothing of the reply seen yet
    await stream(c, pcm24(np.concatenate([speak(REST), silence(1.2)])))
    return first


async def test_speech_before_the_reply_is_heard_continues_the_turn(server_factory):
    with server_factory(FakeBackend(answer_tokens=40, step_s=1.0), **{"speculative.drafter": "none"}) as addr:
        c = await session(addr, reopen_ms=2000)
        first = await pause_then_go_on(c)
        assert "table" in first["transcript"].lower()
        cancelled = await c.until("response.done")
        assert cancelled["response"]["status"] == "cancelled"
        assert cancelled["response"]["status_details"]["reason"] == "turn_detected"
        deleted = await c.until("conversation.item.deleted")
        assert deleted["item_id"] == first["item_id"]
        whole = await c.until("conversation.item.input_audio_transcription.completed")
        text = whole["transcript"].lower()
        assert "table" in text and "two people" in text, text  # one turn, the whole sentence
        # each second of speech is counted once: the continued turn's audio goes with the first transcript
        streamed = (len(np.concatenate([silence(0.3), speak(FIRST), silence(0.8), speak(REST), silence(1.2)]))) / 16_000
        said = first["usage"]["seconds"] + whole["usage"]["seconds"]
        assert 0 < whole["usage"]["seconds"] and said <= streamed, (first["usage"], whole["usage"], streamed)
        await c.until("response.created")  # answered once, for the whole sentence
        kinds = [e["type"] for e in c.events]
        assert kinds.count("input_audio_buffer.speech_stopped") == 2
        assert "response.output_text.delta" not in kinds[: kinds.index("response.done")]
        async with httpx.AsyncClient(timeout=30) as h:
            assert value(await scrape(h, addr), "stream_omni:voice_turns_reopened_total") == 1
        await c.close()


async def test_without_reopen_ms_the_pause_makes_two_turns_as_in_openais_api(server_factory):
    with server_factory(FakeBackend(answer_tokens=40, step_s=1.0), **{"speculative.drafter": "none"}) as addr:
        c = await session(addr, reopen_ms=0)
        first = await pause_then_go_on(c)
        second = await c.until("conversation.item.input_audio_transcription.completed")
        assert "table" not in second["transcript"].lower() and "two people" in second["transcript"].lower()
        assert not any(e["type"] == "conversation.item.deleted" for e in c.events)
        assert first["item_id"] != second["item_id"]
        await c.close()
