"""Voice over a real WebRTC call: espeak-ng speech as Opus → Whisper transcript and a reply on oai-events."""

from __future__ import annotations

import numpy as np

from processors.asr import word_error_rate
from testkit.espeak import silence, speak
from testkit.rtcclient import RtcClient, pcm48
from tests.conftest import requires_espeak

QUESTION = "What is the weather going to be like tomorrow morning?"


@requires_espeak
async def test_spoken_question_over_opus_is_transcribed_and_answered(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RtcClient.call(addr)
        await c.until("session.created", 20)
        c.mic.play(pcm48(np.concatenate([silence(0.5), speak(QUESTION), silence(1.5)])))
        started = await c.until("input_audio_buffer.speech_started", 30)
        stopped = await c.until("input_audio_buffer.speech_stopped", 30)
        assert stopped["audio_end_ms"] > started["audio_start_ms"] + 800
        done = await c.until("conversation.item.input_audio_transcription.completed", 60)
        assert word_error_rate(QUESTION, done["transcript"]) <= 0.25, done["transcript"]
        await c.until("response.created", 30)
        reply = await c.until("response.done", 60)
        assert reply["response"]["status"] in ("completed", "incomplete")
        assert any(e["type"] == "response.output_text.delta" for e in c.events)
        await c.close()


@requires_espeak
async def test_input_rate_follows_the_session_and_output_buffer_clear_is_answered(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RtcClient.call(addr, session={"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}})
        updated = await c.until("session.updated", 20)
        assert updated["session"]["audio"]["input"]["format"]["rate"] == 16000
        c.mic.play(pcm48(np.concatenate([silence(0.5), speak(QUESTION), silence(1.5)])))
        done = await c.until("conversation.item.input_audio_transcription.completed", 60)
        assert word_error_rate(QUESTION, done["transcript"]) <= 0.25, done["transcript"]
        await c.send({"type": "output_audio_buffer.clear", "event_id": "evt_1"})
        cleared = await c.until("output_audio_buffer.cleared", 20)
        assert cleared["response_id"] == ""  # nothing has played on this call
        await c.close()


@requires_espeak
async def test_barge_in_cuts_the_outbound_audio_and_says_so(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RtcClient.call(addr)
        await c.until("session.created", 20)
        call = addr.app.state.webrtc.calls[c.call_id]
        tone = (np.sin(np.arange(48_000 * 20) * 2 * np.pi * 440 / 48_000) * 8000).astype(np.int16)
        # a reply's audio queued on the call directly (20 s of tone): barge-in alone, without a model or a voice
        assert addr.call(lambda: call.source.push(tone, "resp_stand_in", "item_stand_in"))
        started = await c.until("output_audio_buffer.started", 10)
        assert started["response_id"] == "resp_stand_in"
        c.mic.play(pcm48(np.concatenate([silence(0.3), speak(QUESTION), silence(1.0)])))
        await c.until("input_audio_buffer.speech_started", 30)
        cleared = await c.until("output_audio_buffer.cleared", 10)
        assert cleared["response_id"] == "resp_stand_in"
        assert addr.call(lambda: call.source.queued_ms) == 0
        heard = addr.call(lambda: call.source.played_ms("item_stand_in"))
        assert 300 <= heard < 20_000  # cut where the user came in, not at the end
        await c.close()
