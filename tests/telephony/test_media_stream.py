"""Telephony media streams on a real server: a scripted Twilio-protocol provider (``testkit.phonecall``)
over a real WebSocket, espeak-ng speech as the caller's µ-law, Whisper and the Piper voice, and a
fake model that answers in words."""

from __future__ import annotations

import asyncio
import difflib
import re
import time
from typing import Any

import numpy as np
import pytest
import websockets

from processors.asr import load_asr, word_error_rate
from processors.audio import resample
from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from testkit.phonecall import PhoneCaller, to_ulaw
from tests.conftest import requires_espeak
from tests.wsclient import RealtimeClient

QUESTION = "What is the weather going to be like tomorrow morning?"
VOICE = {
    "output_modalities": ["audio"],
    "audio": {"input": {"turn_detection": {"type": "server_vad", "transcription_interval_ms": 0}}},
}
PHONE = {"speculative.drafter": "none", "telephony.enabled": True, "telephony.default_session": VOICE}


def said(text: str, lead: float = 0.3, tail: float = 1.5) -> bytes:
    return to_ulaw(np.concatenate([silence(lead), speak(text), silence(tail)]))


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


async def sideband(addr: str, call: PhoneCaller) -> RealtimeClient:
    """The app's control socket on the call (``?call_id=``), once the call has one."""
    app = addr.app  # type: ignore[attr-defined]
    await call.wait(lambda: any(p.call.live is not None for p in app.state.telephony.calls.values()), 10)
    call_id = next(iter(app.state.telephony.calls))
    return await RealtimeClient.connect(addr, query=f"call_id={call_id}")


async def until_in(c: RealtimeClient, type_: str, within: float) -> dict[str, Any]:
    for ev in c.events:
        if ev["type"] == type_:
            return ev
    return await c.until(type_, within)


@requires_espeak
async def test_a_spoken_question_is_answered_in_paced_ulaw_frames_with_marks(server_factory):
    with server_factory(FakeBackend(answer_tokens=10, step_s=0.005), **PHONE) as addr:
        call = await PhoneCaller.dial(addr)
        side = await sideband(addr, call)
        speech = said(QUESTION)
        await call.say(speech)
        ended = time.monotonic() - 1.5  # the caller stopped speaking (before the trailing silence)
        heard_q = await until_in(side, "conversation.item.input_audio_transcription.completed", 60)
        assert word_error_rate(QUESTION, heard_q["transcript"]) <= 0.25, heard_q["transcript"]
        started = await until_in(side, "output_audio_buffer.started", 60)
        stopped = await side.until("output_audio_buffer.stopped", 60)
        assert started["response_id"] == stopped["response_id"]
        media = [m for m in call.received if m["event"] == "media"]
        marks = [m["mark"]["name"] for m in call.received if m["event"] == "mark"]
        assert media and all(m["streamSid"] == call.stream_sid for m in media)
        assert {len(m["media"]["payload"]) for m in media} == {216}  # base64 of 160 bytes: 20 ms each
        assert marks and call.acked == marks  # every mark came back once played: stopped follows the last
        types = [e["type"] for e in side.events]
        assert "response.output_audio.delta" not in types  # the audio went on the stream
        assert call.first_audio_at is not None
        latency_ms = (call.first_audio_at - ended) * 1000
        print(f"end of speech -> first audio frame: {latency_ms:.0f} ms")
        done = next(e for e in side.events if e["type"] == "response.done")
        text = "".join(e["delta"] for e in side.events if e["type"] == "response.output_audio_transcript.delta")
        assert done["response"]["status"] == "completed"
        pcm = call.heard_pcm()
        voiced = np.flatnonzero(np.abs(pcm) > 0.01)
        assert len(voiced), "the stream carried no audio"
        clip = np.concatenate([np.zeros(2000, np.float32), pcm[voiced[0] : voiced[-1] + 1]])
        heard = await asyncio.to_thread(load_asr().transcribe, resample(clip, 8000, 16_000))
        similarity = difflib.SequenceMatcher(None, " ".join(words(text)), " ".join(words(heard))).ratio()
        assert words(text) and similarity >= 0.5, (text, heard, similarity)
        await call.hang_up()
        app = addr.app
        await call.wait(lambda: not app.state.telephony.calls, 1.0)  # a hangup frees the call within 1 s
        await side.ws.close()


@requires_espeak
async def test_barge_in_clears_the_stream_and_truncates_at_the_acknowledged_mark(server_factory):
    with server_factory(FakeBackend(answer_tokens=300, step_s=0.02), **PHONE) as addr:
        call = await PhoneCaller.dial(addr)
        side = await sideband(addr, call)
        await call.say(said(QUESTION))
        await until_in(side, "output_audio_buffer.started", 60)
        await call.wait(lambda: len(call.heard) >= 8000 * 1.5 and call.acked, 30)  # 1.5 s of the reply heard
        await call.say(said("Stop, stop, I have another question.", lead=0.0, tail=0.5))
        cleared = await until_in(side, "output_audio_buffer.cleared", 30)
        assert call.clears == 1
        truncated = await until_in(side, "conversation.item.truncated", 30)
        item_id = truncated["item_id"]
        calls = addr.app.state.telephony.calls
        heard_ms = addr.call(lambda: next(iter(calls.values())).call.playout.heard_ms(item_id))
        assert truncated["audio_end_ms"] == heard_ms > 1000
        # what the caller heard before the cut (the played frames) is what the item keeps, within a mark
        assert abs(truncated["audio_end_ms"] - len(call.heard) / 8) < 2000
        assert cleared["response_id"]
        await call.hang_up()
        await side.ws.close()


async def test_the_upgrade_signature_is_checked(server_factory):
    token = "twilio-auth-token"
    with server_factory(FakeBackend(), **PHONE, **{"telephony.twilio_auth_token": token}) as addr:
        with pytest.raises(websockets.InvalidStatus) as refused:
            await PhoneCaller.dial(addr, signature="bm90IHRoZSBzaWduYXR1cmU=")
        assert refused.value.response.status_code == 403
        with pytest.raises(websockets.InvalidStatus):
            await PhoneCaller.dial(addr)  # none at all
        call = await PhoneCaller.dial(addr, auth_token=token)
        await call.wait(lambda: bool(addr.app.state.telephony.calls), 10)
        await call.hang_up()


async def test_dtmf_reaches_the_session(server_factory):
    with server_factory(FakeBackend(), **PHONE) as addr:
        call = await PhoneCaller.dial(addr)
        side = await sideband(addr, call)
        await call.dtmf("5")
        await call.dtmf("#")
        first = await side.until("input_audio_buffer.dtmf_event_received", 10)
        second = await side.until("input_audio_buffer.dtmf_event_received", 10)
        assert (first["event"], second["event"]) == ("5", "#")
        assert abs(first["received_at"] - time.time()) < 5
        await call.hang_up()
        await side.ws.close()
