"""Pipecat 1.14's ``OpenAIRealtimeLLMService`` with its default audio output, unmodified but for the URL and
key, in a real Pipecat pipeline against a real server that speaks (the Piper voice, Whisper for input).

Pipecat's default session names no output modality (it sends ``session.update`` without one and asks each of
its own ``response.create``s for audio), so the replies that server VAD starts take the server's default:
``session.output_modalities: ["audio"]`` is what a deployment serving Pipecat sets (docs/COMPATIBILITY.md).
Barge-in is Pipecat's own path with server VAD: on ``input_audio_buffer.speech_started`` it sends
``conversation.item.truncate`` at the shorter of the wall time since the reply's first audio and the audio it
received, as a transport playing in real time would have played it.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np

from processors.asr import normalize_words, word_error_rate
from processors.audio import float32_to_pcm16
from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from testkit.recording import Recording
from tests.conftest import requires_espeak
from tests.e2e.spoken import (
    BARGE_IN,
    QUESTION,
    conversation_text,
    heard,
    overlap,
    tap_server_events,
    transcript_of,
)
from tests.e2e.test_compat_pipecat import MODEL_ID, App, _pipecat, pytestmark, running  # noqa: F401  (skip rule)

CONF = {"model.aliases": [MODEL_ID], "session.output_modalities": ["audio"], "speculative.drafter": "none"}
AHEAD_S = 1.0  # barge in once the server's voice is this far ahead of the playback clock, so the cut is real


@asynccontextmanager
async def default_pipecat(addr: str) -> AsyncIterator[App]:
    """The realtime service as Pipecat builds it by default (no settings), in the usual aggregator pipeline."""
    pc = _pipecat()
    llm = pc.Service(api_key="unused", base_url=f"ws://{addr}/v1/realtime")
    async with running(pc, llm, pc.LLMContext([])) as app:
        yield app


async def say(app: App, text: str) -> None:
    """Speech then a pause, as an input transport hands it over: 20 ms InputAudioRawFrames at 16 kHz."""
    pcm = float32_to_pcm16(np.concatenate([silence(0.3), speak(text), silence(1.2)]))
    step = 16_000 * 2 // 50
    for i in range(0, len(pcm), step):
        frame = app.pc.frames.InputAudioRawFrame(audio=pcm[i : i + step], sample_rate=16_000, num_channels=1)
        await app.queue(frame)


async def until_truthy(cond: Any, within: float) -> Any:
    async with asyncio.timeout(within):
        while not (value := cond()):  # noqa: ASYNC110  (state of the server thread: no event to wait on)
            await asyncio.sleep(0.02)
    return value


def is_audio(event: dict[str, Any], item_id: str) -> bool:
    return event["type"] == "response.output_audio.delta" and event["item_id"] == item_id


@requires_espeak
async def test_spoken_question_spoken_answer_and_a_barge_in_that_truncates(server_factory):
    # its speech fits one Whisper window; decoding takes 3 s, so the reply is still running at the barge-in
    # however fast the voice synthesizes (Piper runs ≈ 30× real time on a quiet core)
    model = Recording(FakeBackend(answer_tokens=60, step_s=0.05))
    with server_factory(model, **CONF) as addr:
        async with default_pipecat(addr) as app:
            pc = app.pc
            sent = await tap_server_events(addr)
            await say(app, QUESTION)
            question = await app.until(pc.frames.TranscriptionFrame, within=60)

            # the spoken answer: audio frames and transcript frames, until the voice is well ahead of playback
            audio, text, first = bytearray(), "", 0.0
            async with asyncio.timeout(90):
                while True:
                    frame = await app.until(pc.frames.Frame)
                    if isinstance(frame, pc.frames.TTSAudioRawFrame):
                        assert frame.sample_rate == 24_000
                        first = first or time.monotonic()
                        audio += frame.audio
                    elif isinstance(frame, pc.frames.TTSTextFrame):
                        text += frame.text
                    elif isinstance(frame, pc.frames.LLMFullResponseEndFrame) and audio:
                        raise AssertionError("the reply ended before the barge-in: make it longer")
                    played = time.monotonic() - first if first else 0.0
                    if played >= 1.5 and len(audio) / 48_000 >= played + AHEAD_S:
                        break
            received_ms = len(audio) / 48

            # barge-in: the user talks over the reply; server VAD's speech_started makes Pipecat truncate
            await say(app, BARGE_IN)
            truncated = await until_truthy(
                lambda: next((e for e in sent if e["type"] == "conversation.item.truncated"), None), 60
            )
            interrupted = await app.until(pc.frames.TranscriptionFrame, within=60)
            # the next turn's prompt: the barge-in answered after what was heard of the reply
            prompt = await until_truthy(
                lambda: next((p for p in model.prompts if any(m["role"] == "assistant" for m in p)), None), 60
            )
            item_id = truncated["item_id"]
            kept = conversation_text(addr, item_id)

    errors = [e for e in sent if e["type"] == "error"]
    assert not errors, errors
    assert word_error_rate(QUESTION, question.text) <= 0.25, question.text
    assert word_error_rate(BARGE_IN, interrupted.text) <= 0.35, interrupted.text

    # a spoken answer with its transcript: the client's transcript is the server's, and Whisper hears it
    full = transcript_of(sent, item_id)
    assert normalize_words(full)[: len(normalize_words(text))] == normalize_words(text)
    words = heard(bytes(audio))
    # the audio trails the transcript by the chunk still arriving at the barge-in: what Whisper hears in it
    # must be the transcript's words
    assert len(words) >= 4 and overlap(" ".join(words), normalize_words(text)) >= 0.5, (text, words)

    # the reply was cancelled by the barge-in and truncated where Pipecat's playback clock stood
    done = next(e for e in sent if e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["output"][0]["id"] == item_id
    assert 1000 <= truncated["audio_end_ms"] <= received_ms
    sent_ms = sum(len(base64.b64decode(e["delta"])) / 48 for e in sent if is_audio(e, item_id))
    assert truncated["audio_end_ms"] < sent_ms  # inside what was spoken: the server's voice ran ahead of playback
    kept_words, full_words = normalize_words(kept), normalize_words(full)
    assert 0 < len(kept_words) < len(full_words) and full_words[: len(kept_words)] == kept_words, (kept, full)

    # the user heard what the conversation keeps: Whisper on the audio up to audio_end_ms
    cut = int(truncated["audio_end_ms"] * 48) // 2 * 2
    assert overlap(kept, heard(bytes(audio[:cut]))) >= 0.5, kept

    # and the next turn's context holds exactly that
    said = [m["content"] for m in prompt if m["role"] == "assistant"]
    assert said and said[-1].strip() == kept.strip(), (said, kept)
