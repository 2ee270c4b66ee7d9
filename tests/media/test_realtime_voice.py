"""Voice in over /v1/realtime: real espeak-ng speech, server VAD, Whisper, barge-in, bad audio."""

from __future__ import annotations

import asyncio
import base64

import numpy as np

from processors.asr import word_error_rate
from processors.audio import float32_to_pcm16
from testkit.espeak import silence, speak
from tests.conftest import requires_espeak
from tests.wsclient import RealtimeClient

pytestmark = requires_espeak

SENTENCE_1 = "Please open the kitchen window."
SENTENCE_2 = "My favorite color is blue."


def pcm24(audio16: np.ndarray) -> bytes:
    import soxr

    return float32_to_pcm16(soxr.resample(audio16, 16_000, 24_000).astype(np.float32))


async def stream(c: RealtimeClient, pcm: bytes, frame_ms: int = 40, rate: int = 24_000) -> None:
    step = rate * 2 * frame_ms // 1000
    for i in range(0, len(pcm), step):
        await c.ws.send(pcm[i : i + step])  # binary frame = raw pcm16
        await asyncio.sleep(0)


async def test_streamed_speech_becomes_a_transcribed_turn_and_a_response(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        audio = np.concatenate([silence(0.5), speak(SENTENCE_1), silence(1.2)])
        await stream(c, pcm24(audio), frame_ms=40)
        started = await c.until("input_audio_buffer.speech_started")
        stopped = await c.until("input_audio_buffer.speech_stopped")
        assert 200 <= started["audio_start_ms"] <= 700
        assert stopped["audio_end_ms"] > started["audio_start_ms"] + 800
        await c.until("input_audio_buffer.committed")
        done = await c.until("conversation.item.input_audio_transcription.completed")
        assert word_error_rate(SENTENCE_1, done["transcript"]) <= 0.25, done["transcript"]
        # create_response defaults to true: a response follows by itself
        rdone = await c.until("response.done")
        assert rdone["response"]["status"] in ("completed", "incomplete")
        await c.close()


async def test_two_utterances_separated_by_silence_are_two_turns(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.update_session(
            {"audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": False}}}}
        )
        audio = np.concatenate([silence(0.3), speak(SENTENCE_1), silence(1.0), speak(SENTENCE_2), silence(1.0)])
        await stream(c, pcm24(audio), frame_ms=100)
        t1 = await c.until("conversation.item.input_audio_transcription.completed")
        t2 = await c.until("conversation.item.input_audio_transcription.completed")
        assert word_error_rate(SENTENCE_1, t1["transcript"]) <= 0.25, t1["transcript"]
        assert word_error_rate(SENTENCE_2, t2["transcript"]) <= 0.25, t2["transcript"]
        assert t1["item_id"] != t2["item_id"]
        assert not any(e["type"] == "response.created" for e in c.events)
        await c.close()


async def test_manual_commit_at_16k_with_base64_append(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.update_session(
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}
        )
        pcm = float32_to_pcm16(speak(SENTENCE_2))
        step = 16000 * 2 // 50  # 20 ms frames
        for i in range(0, len(pcm), step):
            await c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[i : i + step]).decode()})
        await c.send({"type": "input_audio_buffer.commit"})
        await c.send({"type": "response.create", "response": {"max_output_tokens": 8}})  # held until transcribed
        done = await c.until("conversation.item.input_audio_transcription.completed")
        assert word_error_rate(SENTENCE_2, done["transcript"]) <= 0.25
        await c.until("response.done")
        types = [e["type"] for e in c.events]
        assert types.index("conversation.item.input_audio_transcription.completed") < types.index("response.created")
        assert not any(e["type"] == "input_audio_buffer.speech_started" for e in c.events)
        await c.close()


async def test_speech_during_a_response_barges_in(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"speculative.drafter": "none"}) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.say("tell me a very long story")
        await c.send({"type": "response.create", "response": {"max_output_tokens": 500}})
        await c.until("response.output_text.delta")
        await stream(c, pcm24(np.concatenate([speak(SENTENCE_1), silence(1.0)])), frame_ms=20)
        done = await c.until("response.done")
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        rid = done["response"]["id"]
        delivered = c.text_of(rid)
        assert done["response"]["output"][0]["content"][0]["text"] == delivered
        await c.until("conversation.item.input_audio_transcription.completed")
        await c.close()


async def test_bad_audio_gets_errors_and_other_sessions_keep_working(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.max_buffer_s": 2.0}) as addr:
        c = await RealtimeClient.connect(addr)
        other = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await other.until("session.created")
        await c.ws.send(b"\x01\x02\x03")  # odd byte count
        assert (await c.until("error"))["error"]["code"] == "invalid_audio"
        await c.send({"type": "input_audio_buffer.append", "audio": "***not base64***", "event_id": "b64"})
        err = await c.until("error")
        assert err["error"]["code"] == "invalid_base64" and err["error"]["event_id"] == "b64"
        await c.send({"type": "session.update", "session": {"audio": {"input": {"format": {"rate": 44100}}}}})
        assert (await c.until("error"))["error"]["code"] == "unsupported_rate"
        await c.update_session({"audio": {"input": {"turn_detection": None}}})
        noise = (np.random.default_rng(0).standard_normal(24000 * 3) * 0.01).astype(np.float32)
        pcm = float32_to_pcm16(noise)
        for i in range(0, len(pcm), 48000):
            await c.ws.send(pcm[i : i + 48000])
        assert (await c.until("error"))["error"]["code"] == "buffer_too_long"
        await c.send({"type": "input_audio_buffer.clear"})
        await c.until("input_audio_buffer.cleared")
        await c.send({"type": "input_audio_buffer.commit", "event_id": "empty"})
        assert (await c.until("error"))["error"]["code"] == "input_audio_buffer_commit_empty"
        done = await other.ask("are you there", max_output_tokens=4)
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()
        await other.close()


async def stream_paced(c: RealtimeClient, pcm: bytes, frame_ms: int = 40, rate: int = 24_000) -> None:
    """As a live client does: one frame per ``frame_ms`` of wall time (audio arrives no faster than spoken)."""
    loop = asyncio.get_running_loop()
    step = rate * 2 * frame_ms // 1000
    t0 = loop.time()
    for k, i in enumerate(range(0, len(pcm), step)):
        await c.ws.send(pcm[i : i + step])
        await asyncio.sleep(max(0.0, t0 + (k + 1) * frame_ms / 1000 - loop.time()))


LONG = "Please open the kitchen window and then turn on all of the lights in the living room."


async def test_transcript_streams_while_the_user_speaks_and_the_deltas_add_up(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.update_session(
            {"audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": False}}}}
        )
        # speech at a live pace, then a pause shorter than the 500 ms window; no more audio until the
        # transcript shows, so the turn cannot end first however slow this machine is
        await stream_paced(c, pcm24(np.concatenate([silence(0.3), speak(LONG), silence(0.3)])))
        first = await c.until("conversation.item.input_audio_transcription.delta")
        await stream(c, pcm24(silence(1.0)))
        done = await c.until("conversation.item.input_audio_transcription.completed")
        types = [e["type"] for e in c.events]
        assert types.index("input_audio_buffer.speech_stopped") > c.events.index(first)
        deltas = [e for e in c.events if e["type"] == "conversation.item.input_audio_transcription.delta"]
        assert all(e["item_id"] == done["item_id"] for e in deltas)
        shown = "".join(e["delta"] for e in deltas)
        # the words two partial passes agreed on go out while speaking; the final one-shot pass is the
        # transcript of record. When it disagrees with what was shown (seen under heavy CPU load), the
        # server counts it as inconsistent — never silently.
        consistent = shown == done["transcript"]
        counted = await asyncio.to_thread(_transcripts_counted, addr, consistent)
        assert counted >= 1, (shown, done["transcript"])
        assert word_error_rate(LONG, done["transcript"]) <= 0.25, done["transcript"]
        await c.close()


def _transcripts_counted(addr: str, consistent: bool) -> float:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://{addr}/metrics", timeout=30).text
    label = str(consistent).lower()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "stream_omni:voice_transcripts_total" and s.labels.get("consistent") == label:
                return s.value
    return 0.0
