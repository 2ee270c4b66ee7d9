"""Speculative turn-taking over a real server with real speech (espeak-ng), server VAD and Whisper.

No test here depends on this machine's speed: the VAD runs on the audio clock, so a client that
stops sending holds the turn open (the silence window cannot close) while the test polls /metrics
for the server's prepared reply, then sends the rest.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from processors.asr import word_error_rate
from testkit.espeak import silence, speak
from tests.conftest import requires_espeak
from tests.http.test_metrics import scrape, value
from tests.media.test_realtime_voice import pcm24, stream
from tests.wsclient import RealtimeClient

pytestmark = requires_espeak

SPEC = "stream_omni:voice_speculation_total"


async def until_metric(addr: str, outcome: str, target: float, within_s: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    async with httpx.AsyncClient(timeout=30) as h:
        while value(await scrape(h, addr), SPEC, outcome=outcome) < target:
            assert loop.time() < deadline, f"no {outcome} speculation within {within_s} s"
            await asyncio.sleep(0.05)


async def counts(addr: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=30) as h:
        samples = await scrape(h, addr)
    return {o: value(samples, SPEC, outcome=o) for o in ("prepared", "committed", "discarded", "mismatched")}


async def voice_session(addr: str, **turn_detection: object) -> RealtimeClient:
    c = await RealtimeClient.connect(addr)
    await c.until("session.created")
    td = {"type": "server_vad", "transcription_interval_ms": 0, **turn_detection}
    await c.update_session({"audio": {"input": {"turn_detection": td}}})
    return c


def kinds(c: RealtimeClient) -> list[str]:
    return [e["type"] for e in c.events if e["type"] not in ("session.created", "session.updated")]


def on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def test_prepared_reply_commits_with_todays_events_and_barge_in_still_cancels(
    tiny_backend, server_factory, monkeypatch
):
    speech = speak("Please open the kitchen window.")
    tokenized_on_loop: list[bool] = []  # every prompt, the prepared one included, is tokenized off the loop
    chat_tokens = tiny_backend.chat_tokens
    monkeypatch.setattr(
        tiny_backend, "chat_tokens", lambda *a, **k: tokenized_on_loop.append(on_a_loop()) or chat_tokens(*a, **k)
    )
    with server_factory(tiny_backend, **{"speculative.drafter": "none"}) as addr:
        c = await voice_session(addr)
        await stream(
            c, pcm24(np.concatenate([silence(0.3), speech, silence(0.4)]))
        )  # a pause, not an end (the VAD counts ~300 ms)
        await until_metric(addr, "prepared", 1)
        assert not any(e["type"].startswith("response.") for e in c.events)  # prepared unseen
        assert "input_audio_buffer.speech_stopped" not in kinds(c)
        await stream(c, pcm24(silence(1.0)))
        done = await c.until("response.done")
        assert (await counts(addr))["committed"] == 1
        assert tokenized_on_loop == [False], tokenized_on_loop  # the prepared reply's prompt, on the tokenizer thread
        transcript = next(e for e in c.events if e["type"].endswith("transcription.completed"))["transcript"]
        assert word_error_rate("Please open the kitchen window.", transcript) <= 0.25, transcript

        # the same turn typed into a fresh session: the same events and the same reply, just later
        ref = await voice_session(addr, speculation_ms=0)
        await ref.say(transcript)
        await ref.send({"type": "response.create"})
        ref_done = await ref.until("response.done")
        voice_kinds = kinds(c)
        start = voice_kinds.index("response.created")
        assert voice_kinds[start:] == kinds(ref)[kinds(ref).index("response.created") :]
        assert voice_kinds[:start] == [
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "conversation.item.added",
            "conversation.item.input_audio_transcription.delta",
            "conversation.item.input_audio_transcription.completed",
            "conversation.item.done",
        ]
        assert c.text_of(done["response"]["id"]) == ref.text_of(ref_done["response"]["id"])
        assert done["response"]["status"] == ref_done["response"]["status"]

        # barge-in on a reply that began as a speculation: cancelled within a step, as any other
        await c.update_session({"max_output_tokens": 500})
        await stream(c, pcm24(np.concatenate([speech, silence(0.4)])))
        await until_metric(addr, "prepared", 2)
        await stream(c, pcm24(silence(1.0)))
        await c.until("response.output_text.delta")
        await stream(c, pcm24(np.concatenate([speech, silence(1.0)])))
        cancelled = await c.until("response.done")
        assert cancelled["response"]["status"] == "cancelled"
        assert cancelled["response"]["status_details"]["reason"] == "turn_detected"
        await c.close()
        await ref.close()


async def test_speech_after_a_short_pause_drops_the_prepared_reply_silently(tiny_backend, server_factory):
    first, second = speak("Please open the kitchen window"), speak("and turn on the lights.")
    with server_factory(tiny_backend, **{"speculative.drafter": "none"}) as addr:
        c = await voice_session(addr)
        await stream(c, pcm24(np.concatenate([silence(0.3), first, silence(0.4)])))
        await until_metric(addr, "prepared", 1)
        await stream(c, pcm24(np.concatenate([second, silence(1.0)])))
        await c.until("response.done")
        n = await counts(addr)
        assert n["discarded"] == 1 and n["committed"] <= 1
        k = kinds(c)
        assert k.count("input_audio_buffer.speech_started") == 1 and k.count("input_audio_buffer.speech_stopped") == 1
        assert k.count("response.created") == 1
        assert k.index("response.created") > k.index("input_audio_buffer.speech_stopped")
        done = next(e for e in c.events if e["type"].endswith("transcription.completed"))
        assert word_error_rate("Please open the kitchen window and turn on the lights.", done["transcript"]) <= 0.3
        assert len([e for e in c.events if e["type"] == "conversation.item.done"]) == 2  # the turn, the reply
        await c.close()


async def test_whisper_starts_at_the_first_silence_and_its_text_is_the_transcript(
    tiny_backend, server_factory, monkeypatch
):
    """On a small CPU a Whisper pass outlasts the window left after ``speculation_ms`` (bench voice):
    the pass starts after ~64 ms of silence, the reply waits for 200 ms, and no pass runs after the window."""
    text = "Please open the kitchen window."
    with server_factory(tiny_backend, **{"speculative.drafter": "none"}) as addr:
        asr = addr.services.asr
        passes: list[float] = []  # seconds of audio each Whisper pass heard
        real = asr.transcribe

        def spy(audio: np.ndarray) -> str:
            out = real(audio)
            passes.append(audio.size / 16_000)
            return str(out)

        monkeypatch.setattr(asr, "transcribe", spy)
        c = await voice_session(addr)  # speculation_ms 200 (the default), no partial passes
        speech = speak(text)
        # the VAD counts silence from ~60-80 ms after espeak's last sample: 180 ms here is ~110 ms of it
        await stream(c, pcm24(np.concatenate([silence(0.3), speech, silence(0.18)])))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while not passes:  # the audio clock stands still while nothing is sent: the turn stays open
            assert loop.time() < deadline, "no Whisper pass within 180 ms of silence"
            await asyncio.sleep(0.05)
        assert (await counts(addr))["prepared"] == 0  # under 200 ms of silence: too early for the reply
        await stream(c, pcm24(silence(1.0)))
        await c.until("response.done")
        n = await counts(addr)
        assert n["prepared"] == 1 and n["committed"] == 1, n
        assert len(passes) == 1  # the pause pass was the transcript: nothing ran after the window
        assert passes[0] <= 0.3 + len(speech) / 16_000 + 0.18  # it heard the speech and ≤ 180 ms of silence
        done = next(e for e in c.events if e["type"].endswith("transcription.completed"))
        assert word_error_rate(text, done["transcript"]) <= 0.25, done["transcript"]
        await c.close()


@pytest.mark.real_model  # Whisper tiny.en
def test_the_pause_pass_hears_the_same_words_as_a_pass_over_the_whole_turn():
    """The pause pass now runs at 64 ms of silence (not 200 ms): what it heard must already be every word."""
    from processors.asr import load_asr
    from processors.vad import ServerVad, ServerVadConfig, SpeechPaused, SpeechStopped

    asr = load_asr()
    for text in ["Please turn on the lights in the kitchen.", "What is the weather going to be like tomorrow morning?"]:
        vad = ServerVad(ServerVadConfig(), pauses=True)  # speculation_ms 200: the pause comes at 64 ms
        pause_audio, turn_audio = None, None
        audio = np.concatenate([silence(0.5), speak(text), silence(1.0)])
        for i in range(0, audio.size, 640):  # 40 ms frames, as a client sends them
            for ev in vad.feed(audio[i : i + 640]):
                if isinstance(ev, SpeechPaused):
                    pause_audio = vad.turn_audio()  # what media.py hands the pause pass
                    silence_heard = vad.now_ms - ev.silence_start_ms
                elif isinstance(ev, SpeechStopped):
                    turn_audio = ev.audio
        assert pause_audio is not None and turn_audio is not None
        assert silence_heard < 200 and turn_audio.size - pause_audio.size >= 16 * 400
        whole, early = asr.transcribe(turn_audio), asr.transcribe(pause_audio)
        assert word_error_rate(whole, early) == 0, (whole, early)
        assert word_error_rate(text, early) <= 0.25, early
