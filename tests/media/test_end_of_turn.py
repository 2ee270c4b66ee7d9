"""The end-of-turn model and backchannels over a real server: espeak-ng speech, silero VAD, Whisper, Smart Turn.

The VAD runs on the audio clock, so the client holds a pause open by not sending: it streams the
speech and a little silence, waits (on /metrics) until the model and the pause transcript are in,
then streams the rest. Where the turn ends is then a fact of the audio, not of this box's speed.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from processors import smart_turn
from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from tests.conftest import requires_espeak
from tests.http.test_metrics import scrape, value
from tests.media.test_realtime_voice import pcm24, stream
from tests.wsclient import RealtimeClient

pytestmark = [
    requires_espeak,
    pytest.mark.skipif(not smart_turn.available(), reason="the Smart Turn model (pipecat-ai wheel) is not installed"),
]

STAGE = "stream_omni:voice_stage_seconds_count"


async def until_stages(addr: str, eot: float, asr: float, within_s: float = 120) -> None:
    """Until the end-of-turn model has run ``eot`` times and Whisper ``asr`` calls."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    async with httpx.AsyncClient(timeout=30) as h:
        while True:
            samples = await scrape(h, addr)
            if value(samples, STAGE, stage="end_of_turn") >= eot and value(samples, STAGE, stage="asr_run") >= asr:
                return
            assert loop.time() < deadline, "the end-of-turn model or the pause pass did not come back"
            await asyncio.sleep(0.05)


async def semantic_session(addr: str, **extra: object) -> RealtimeClient:
    c = await RealtimeClient.connect(addr, query="")
    await c.until("session.created")
    td = {"type": "semantic_vad", "transcription_interval_ms": 0, **extra}
    await c.update_session({"audio": {"input": {"turn_detection": td}}})
    return c


def stopped_after_speech_ms(c: RealtimeClient, speech_end_ms: int) -> list[int]:
    return [e["audio_end_ms"] - speech_end_ms for e in c.events if e["type"] == "input_audio_buffer.speech_stopped"]


@pytest.mark.real_model
async def test_a_complete_sentence_ends_on_the_short_window(tiny_backend, server_factory):
    lead, speech = silence(0.3), speak("Can you turn off the lights?")
    with server_factory(tiny_backend, **{"speculative.drafter": "none"}) as addr:
        c = await semantic_session(addr)
        await stream(c, pcm24(np.concatenate([lead, speech, silence(0.12)])))  # the pause is heard, not over
        await until_stages(addr, eot=1, asr=1)
        assert "input_audio_buffer.speech_stopped" not in [e["type"] for e in c.events]
        await stream(c, pcm24(silence(1.5)))
        done = await c.until("conversation.item.input_audio_transcription.completed")
        [after] = stopped_after_speech_ms(c, (len(lead) + len(speech)) // 16)
        # the complete window (200 ms from where the VAD heard the silence begin, which is up to ~100 ms
        # before espeak-ng's last sample), well inside today's 500 ms window and the model's 1000 ms unsure one
        assert 0 < after < 400, after
        assert "turn off the light" in done["transcript"].lower()
        await c.close()


@pytest.mark.real_model
async def test_a_pause_after_a_conjunction_is_not_a_turn_end(tiny_backend, server_factory):
    first, rest = speak("Please open the kitchen window and"), speak("turn on the lights.")
    with server_factory(tiny_backend, **{"speculative.drafter": "none"}) as addr:
        c = await semantic_session(addr)
        await stream(c, pcm24(np.concatenate([silence(0.3), first, silence(0.12)])))
        await until_stages(addr, eot=1, asr=1)
        # a 1.5 s pause: past the unsure window (1 s), inside the continuing one (4 s) that "and" sets
        await stream(c, pcm24(np.concatenate([silence(1.38), rest, silence(0.12)])))
        await until_stages(addr, eot=2, asr=2)
        await stream(c, pcm24(silence(1.5)))
        done = await c.until("conversation.item.input_audio_transcription.completed")
        kinds = [e["type"] for e in c.events]
        assert kinds.count("input_audio_buffer.speech_stopped") == 1  # one turn, not cut at "and"
        assert "window and" in done["transcript"].lower() and "turn on the light" in done["transcript"].lower()
        await c.close()


async def talk_over_reply(addr: str, words: str) -> tuple[RealtimeClient, dict]:
    """A long text reply in progress, then ``words`` spoken over it; the reply's response.done."""
    c = await semantic_session(addr)
    await c.say("Tell me a long story.")
    await c.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
    await c.until("response.output_text.delta")
    await stream(c, pcm24(np.concatenate([silence(0.3), speak(words), silence(1.6)])))
    await seen(c, "conversation.item.input_audio_transcription.completed")
    return c, await seen(c, "response.done")


async def seen(c: RealtimeClient, type_: str) -> dict:
    """The first ``type_`` event received so far, or the next one."""
    return next((e for e in c.events if e["type"] == type_), None) or await c.until(type_)


@pytest.mark.real_model
async def test_an_acknowledgement_over_a_reply_does_not_cancel_it(server_factory):
    with server_factory(FakeBackend(answer_tokens=600, step_s=0.02), **{"speculative.drafter": "none"}) as addr:
        c, done = await talk_over_reply(addr, "Okay.")
        # the reply went on to its end (the session's max_output_tokens), never cancelled
        assert done["response"]["status"] in ("completed", "incomplete"), done["response"]
        assert (done["response"].get("status_details") or {}).get("reason") != "turn_detected"
        kinds = [e["type"] for e in c.events]
        assert kinds.count("response.created") == 1  # and "okay" was not answered
        async with httpx.AsyncClient(timeout=30) as h:
            assert value(await scrape(h, addr), "stream_omni:voice_overlaps_total", outcome="backchannel") == 1
        await c.close()


@pytest.mark.real_model
async def test_a_real_interruption_still_cancels_the_reply(server_factory):
    with server_factory(FakeBackend(answer_tokens=600, step_s=0.02), **{"speculative.drafter": "none"}) as addr:
        c, done = await talk_over_reply(addr, "Wait, what about the weather in Paris?")
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        while [e["type"] for e in c.events].count("response.created") < 2:  # the interruption is answered
            await c.recv()
        await c.close()
