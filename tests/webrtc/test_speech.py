"""Spoken replies on a call's Opus track: real aiortc peers on loopback, espeak-ng questions, Whisper,
the Piper voice and a fake model that answers in words ("alpha bravo …").

As on OpenAI's WebRTC calls, the reply's audio goes on the track (no ``response.output_audio.delta``
on ``oai-events``), ``output_audio_buffer.started`` / ``.stopped`` / ``.cleared`` follow playout, and a
cut (barge-in, ``output_audio_buffer.clear``) truncates the item to what the track played. Every
server event is checked against the openai SDK's own ``RealtimeServerEvent``."""

from __future__ import annotations

import asyncio
import difflib
import re
import time
from typing import Any

import numpy as np

from gateway.realtime.speech_out import heard_length
from processors.asr import load_asr, word_error_rate
from processors.audio import resample
from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from testkit.rtcclient import RATE, RtcClient, pcm48
from tests.conftest import requires_espeak
from tests.sdk_events import conform

QUESTION = "What is the weather going to be like tomorrow morning?"
STEADY = {"speculative.drafter": "none"}
VOICE = {
    "output_modalities": ["audio"],
    "audio": {"input": {"turn_detection": {"type": "server_vad", "transcription_interval_ms": 0}}},
}


async def seen_or_until(c: RtcClient, type_: str, wait_s: float, start: int = 0) -> dict[str, Any]:
    """The first ``type_`` event from ``c.events[start]`` on, whether it already went by or is still to
    come (within ``wait_s``)."""
    for ev in c.events[start:]:
        if ev["type"] == type_:
            return ev
    return await c.until(type_, wait_s)


def transcript_of(events: list[dict[str, Any]], rid: str) -> str:
    kind = "response.output_audio_transcript.delta"
    return "".join(e["delta"] for e in events if e["type"] == kind and e["response_id"] == rid)


def heard_words(addr: Any, c: RtcClient, item_id: str, said: str, played_ms: int) -> str:
    """What of ``said`` a listener heard after ``played_ms`` of the item (the session's word end times)."""
    live = addr.app.state.webrtc.calls[c.call_id].live
    marks = addr.call(lambda: list(live.session.spoken[item_id].marks))
    return said[: heard_length(marks, played_ms)].rstrip()


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def say(text: str, lead: float = 0.5, tail: float = 1.5) -> np.ndarray:
    return pcm48(np.concatenate([silence(lead), speak(text), silence(tail)]))


def user_text(text: str) -> dict[str, Any]:
    content = [{"type": "input_text", "text": text}]
    return {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": content}}


@requires_espeak
async def test_a_spoken_question_is_answered_in_speech_on_the_track(server_factory):
    with server_factory(FakeBackend(answer_tokens=10, step_s=0.005), **STEADY) as addr:
        c = await RtcClient.call(addr, session=VOICE, record=True)
        await c.until("session.updated", 20)
        c.mic.play(say(QUESTION))
        heard_q = await c.until("conversation.item.input_audio_transcription.completed", 60)
        assert word_error_rate(QUESTION, heard_q["transcript"]) <= 0.25, heard_q["transcript"]
        started = await c.until("output_audio_buffer.started", 60)
        t_started = time.monotonic()
        stopped = await c.until("output_audio_buffer.stopped", 60)
        t_stopped = time.monotonic()
        rid = started["response_id"]
        types = [e["type"] for e in c.events]
        done = next(e for e in c.events if e["type"] == "response.done")
        assert done["response"]["id"] == rid == stopped["response_id"] and done["response"]["status"] == "completed"
        assert "response.output_audio.delta" not in types  # the audio went on the track, as on OpenAI
        assert types.index("response.content_part.added") < types.index("output_audio_buffer.started")
        assert types.index("response.output_audio.done") < types.index("response.done")
        assert types.index("response.done") < types.index("output_audio_buffer.stopped")
        said = transcript_of(c.events, rid)
        assert done["response"]["output"][0]["content"][0] == {"type": "output_audio", "transcript": said}
        conform(c.events)
        # paced in real time: playout lasted about as long as the audio (not dumped in a burst)
        audio_s = done["response"]["usage"]["output_token_details"]["audio_tokens"] * 0.05
        assert t_stopped - t_started >= 0.8 * audio_s - 0.2, (t_stopped - t_started, audio_s)
        # what arrived over Opus is the reply: our Whisper hears its words
        pcm = c.audio().astype(np.float32) / 32768.0
        voiced = np.flatnonzero(np.abs(pcm) > 0.01)
        assert len(voiced), "the track carried no audio"
        pcm = np.concatenate([np.zeros(RATE // 4, np.float32), pcm[voiced[0] : voiced[-1] + 1]])
        text = await asyncio.to_thread(load_asr().transcribe, resample(pcm, RATE, 16_000))
        # letters, not words: Whisper tiny.en often joins or splits the fake model's call-sign words ("tango
        # lima" → "Tangalima"); the heard reply scores ~0.9 where unrelated words of the same kind score ~0.3
        similarity = difflib.SequenceMatcher(None, " ".join(words(said)), " ".join(words(text))).ratio()
        assert words(said) and similarity >= 0.6, (said, text, similarity)
        await c.close()


@requires_espeak
async def test_barge_in_cuts_the_track_and_truncates_the_reply_to_what_was_played(server_factory):
    with server_factory(FakeBackend(answer_tokens=300, step_s=0.02), **STEADY) as addr:
        c = await RtcClient.call(addr, session=VOICE, record=True)
        await c.until("session.updated", 20)
        c.mic.play(say(QUESTION))
        started = await c.until("output_audio_buffer.started", 90)
        rid = started["response_id"]
        item_id = next(e["item"]["id"] for e in c.events if e["type"] == "response.output_item.added")
        c.mic.play(say(QUESTION, lead=0.3, tail=1.0))  # the user talks over the reply
        talk = await c.until("input_audio_buffer.speech_started", 30)
        barge = len(c.events)
        cleared = await c.until("output_audio_buffer.cleared", 10)
        t_cut = time.monotonic()
        assert cleared["response_id"] == rid
        done = await seen_or_until(c, "response.done", 30)
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        truncated = await c.until("conversation.item.truncated", 10)
        assert truncated["item_id"] == item_id and truncated["content_index"] == 0
        played = addr.call(lambda: addr.app.state.webrtc.calls[c.call_id].source.played_ms(item_id))
        assert 0 < truncated["audio_end_ms"] == played
        await c.send({"type": "conversation.item.retrieve", "item_id": item_id})
        kept = (await c.until("conversation.item.retrieved", 10))["item"]["content"][0]["transcript"]
        # the item keeps the words whose audio had played past their middle when the track was cut
        assert kept == heard_words(addr, c, item_id, transcript_of(c.events, rid), played)
        # the track went quiet at the cut, while the user went on talking (no new reply before they stop)
        stopped = await seen_or_until(c, "input_audio_buffer.speech_stopped", 30, barge)
        assert stopped["audio_end_ms"] - talk["audio_start_ms"] > 1500  # so the window below is all cut
        before = c.audio(until=t_cut)
        after = c.audio(since=t_cut + 0.5, until=t_cut + 1.2)
        assert np.abs(before).max() > 1000 and len(after) >= RATE // 4
        assert np.abs(after).max() < 100, np.abs(after).max()
        assert "response.output_audio.delta" not in [e["type"] for e in c.events]
        conform(c.events)
        await c.close()


async def test_cancel_and_clear_cut_playback_without_errors_and_keep_what_was_played(server_factory):
    cfg = {**STEADY, "audio.enabled": False}  # text in, speech out: no Whisper needed
    with server_factory(FakeBackend(answer_tokens=200, step_s=0.02), **cfg) as addr:
        c = await RtcClient.call(addr, session={"output_modalities": ["audio"]})
        await c.until("session.updated", 20)
        await c.send({"type": "output_audio_buffer.clear"})
        idle = await c.until("output_audio_buffer.cleared", 10)  # nothing has played: still answered
        assert idle["response_id"] == ""
        await c.send(user_text("Tell me a long story."))
        await c.send({"type": "response.create"})
        started = await c.until("output_audio_buffer.started", 60)
        rid = started["response_id"]
        item_id = next(e["item"]["id"] for e in c.events if e["type"] == "response.output_item.added")
        # what the JS Agents SDK's WebRTC transport sends on interrupt(): no audio_end_ms anywhere
        await c.send({"type": "response.cancel"})
        await c.send({"type": "output_audio_buffer.clear"})
        cleared = await c.until("output_audio_buffer.cleared", 10)
        assert cleared["response_id"] == rid
        done = await seen_or_until(c, "response.done", 30)
        assert done["response"]["status"] == "cancelled"
        truncated = await c.until("conversation.item.truncated", 10)
        assert truncated["item_id"] == item_id
        played = addr.call(lambda: addr.app.state.webrtc.calls[c.call_id].source.played_ms(item_id))
        assert truncated["audio_end_ms"] == played
        await c.send({"type": "conversation.item.retrieve", "item_id": item_id})
        kept = (await c.until("conversation.item.retrieved", 10))["item"]["content"][0]["transcript"]
        assert kept == heard_words(addr, c, item_id, transcript_of(c.events, rid), played)
        assert not [e for e in c.events if e["type"] == "error"]  # the cancel and the clear both landed
        assert "output_audio_buffer.stopped" not in [e["type"] for e in c.events]  # cleared, not stopped
        conform(c.events)
        await c.close()
