"""Voice in, voice out over a real server: espeak-ng speech, server VAD, Whisper, the Piper voice, and
a fake model that answers in words. The reply prepared during the user's pause speaks early; a
barge-in silences the reply at once."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from tests.conftest import requires_espeak
from tests.media.test_realtime_voice import pcm24, stream
from tests.media.test_speculation import counts, until_metric
from tests.wsclient import RealtimeClient

pytestmark = requires_espeak


async def voice_session(addr: str) -> RealtimeClient:
    c = await RealtimeClient.connect(addr, query="")
    await c.until("session.created")
    td = {"type": "server_vad", "transcription_interval_ms": 0}
    session = {"output_modalities": ["audio"], "audio": {"input": {"turn_detection": td}}}
    await c.update_session(session)
    return c


def spy_synthesis(addr: str) -> list[tuple[float, str]]:
    """(monotonic time, words) of every synthesis the server starts (the server runs in this process)."""
    svc = addr.services.speech  # type: ignore[attr-defined]
    calls: list[tuple[float, str]] = []
    real = svc.run

    async def run(text, settings):  # type: ignore[no-untyped-def]
        calls.append((time.monotonic(), text))
        return await real(text, settings)

    svc.run = run
    return calls


async def test_the_prepared_reply_has_its_first_audio_ready_at_commit(server_factory):
    speech = speak("Please open the kitchen window.")
    with server_factory(FakeBackend(answer_tokens=30), **{"speculative.drafter": "none"}) as addr:
        calls = spy_synthesis(addr)
        c = await voice_session(addr)
        await stream(c, pcm24(np.concatenate([silence(0.3), speech, silence(0.4)])))  # a pause, not an end
        await until_metric(addr, "prepared", 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not calls:  # the prepared reply's first chunk goes to the voice, unseen
            assert loop.time() < deadline, "the prepared reply's first chunk was not synthesized"
            await asyncio.sleep(0.02)
        assert not any(e["type"].startswith("response.") for e in c.events)  # nothing heard yet
        first_words = calls[0][1]
        await stream(c, pcm24(silence(1.0)))
        done = await c.until("response.done")
        assert (await counts(addr))["committed"] == 1
        transcript = [e["delta"] for e in c.events if e["type"] == "response.output_audio_transcript.delta"]
        assert transcript and done["response"]["status"] == "completed"
        assert [w for _, w in calls].count(first_words) == 1  # adopted: never synthesized twice
        await c.close()


async def test_speech_on_the_pause_drops_the_prepared_audio_unheard(server_factory):
    first, second = speak("Please open the kitchen window"), speak("and turn on the lights.")
    with server_factory(FakeBackend(answer_tokens=30), **{"speculative.drafter": "none"}) as addr:
        c = await voice_session(addr)
        await stream(c, pcm24(np.concatenate([silence(0.3), first, silence(0.4)])))
        await until_metric(addr, "prepared", 1)
        await stream(c, pcm24(np.concatenate([second, silence(1.0)])))
        await c.until("response.done")
        assert (await counts(addr))["discarded"] == 1
        kinds = [e["type"] for e in c.events]
        assert kinds.count("response.created") == 1
        assert kinds.index("response.output_audio.delta") > kinds.index("input_audio_buffer.speech_stopped")
        token = c.events[0]["resume"]["token"]
        ready = addr.call(lambda: dict(addr.services.registry.sessions[token].speaker._ready))
        assert ready == {}  # nothing prepared is left to be heard
        await c.close()


async def test_barge_in_stops_the_audio_at_once(server_factory):
    speech = speak("Please open the kitchen window.")
    with server_factory(FakeBackend(answer_tokens=400, step_s=0.02), **{"speculative.drafter": "none"}) as addr:
        c = await voice_session(addr)
        await stream(c, pcm24(np.concatenate([silence(0.3), speech, silence(1.0)])))
        await c.until("response.output_audio.delta")
        await stream(c, pcm24(np.concatenate([speech, silence(0.2)])))  # the user talks over the reply
        started = await c.until("input_audio_buffer.speech_started")
        done = await c.until("response.done")
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        rid = done["response"]["id"]
        last_audio = max(
            i for i, e in enumerate(c.events) if e["type"] == "response.output_audio.delta" and e["response_id"] == rid
        )
        assert last_audio < c.events.index(done)  # no audio after response.done …
        try:  # … nor later
            while True:
                ev = await c.recv(timeout=0.5)
                assert not (ev["type"] == "response.output_audio.delta" and ev.get("response_id") == rid)
        except TimeoutError:
            pass
        assert started["audio_start_ms"] > 0
        await c.close()


async def test_g711_input_is_decoded_before_the_buffer(server_factory):
    import base64

    from processors.asr import word_error_rate
    from processors.audio_formats import encode

    text = "Please open the kitchen window."
    with server_factory(FakeBackend(answer_tokens=4), **{"speculative.drafter": "none"}) as addr:
        c = await RealtimeClient.connect(addr, query="")
        await c.until("session.created")
        audio_in = {"format": {"type": "audio/pcmu"}, "turn_detection": None}
        upd = await c.update_session({"audio": {"input": audio_in}})
        assert upd["session"]["audio"]["input"]["format"] == {"type": "audio/pcmu"}
        ulaw = encode(np.concatenate([silence(0.3), speak(text), silence(0.3)]), 16_000, "audio/pcmu")
        await c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(ulaw).decode()})
        await c.send({"type": "input_audio_buffer.commit"})
        done = await c.until("conversation.item.input_audio_transcription.completed")
        assert word_error_rate(text, done["transcript"]) <= 0.25, done["transcript"]
        await c.close()
