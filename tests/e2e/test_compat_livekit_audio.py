"""LiveKit Agents 1.8.9's ``RealtimeModel`` (openai plugin) with its default modalities (text and audio, so it
asks for ``output_modalities: ["audio"]``), unmodified but for the URL and key, in an ``AgentSession`` against a
real server that speaks (the Piper voice, Whisper for input).

There is no room: the session's audio input and output are LiveKit's own I/O interfaces, implemented here as a
microphone (20 ms frames in real time: espeak-ng speech when the test speaks, silence otherwise) and a speaker
(plays in real time and reports where its playhead stood, as a room's audio output does). Barge-in is LiveKit's
own path with server VAD: ``input_audio_buffer.speech_started`` interrupts the agent's speech, the speaker's
buffer is cleared, and the agent truncates the reply at the playback position.
"""

from __future__ import annotations

import asyncio
import time
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
from tests.e2e.test_compat_livekit import pytestmark  # noqa: F401  (the same skip rule)

RATE = 24_000
FRAME = RATE // 50  # 20 ms
CONF = {"model.aliases": ["gpt-realtime"], "speculative.drafter": "none"}


def devices() -> tuple[Any, Any]:
    """(Mic, Speaker) classes on LiveKit's AudioInput / AudioOutput."""
    from livekit import rtc
    from livekit.agents.voice.io import AudioInput, AudioOutput, AudioOutputCapabilities

    class Mic(AudioInput):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(label="test-mic")
            self.pending = np.zeros(0, dtype=np.int16)
            self.next_at: float | None = None

        def say(self, text: str) -> None:
            pcm = float32_to_pcm16(np.concatenate([speak(text, RATE), silence(1.2, RATE)]))
            self.pending = np.concatenate([self.pending, np.frombuffer(pcm, dtype=np.int16)])

        async def __anext__(self) -> Any:
            loop = asyncio.get_running_loop()
            self.next_at = self.next_at or loop.time()
            await asyncio.sleep(max(0.0, self.next_at - loop.time()))  # a microphone's real-time pace
            self.next_at += FRAME / RATE
            chunk, self.pending = self.pending[:FRAME], self.pending[FRAME:]
            chunk = np.concatenate([chunk, np.zeros(FRAME - len(chunk), dtype=np.int16)])
            return rtc.AudioFrame(chunk.tobytes(), RATE, 1, FRAME)

    class Speaker(AudioOutput):  # type: ignore[misc]
        """Plays each segment in real time from its first frame; reports the playhead when it ends or is cleared."""

        def __init__(self) -> None:
            super().__init__(label="test-speaker", capabilities=AudioOutputCapabilities(pause=False), sample_rate=RATE)
            self.audio = bytearray()  # the current segment's audio
            self.segments: list[bytes] = []  # audio of each finished segment
            self.first_at: float | None = None  # monotonic time the current segment began to play
            self.pushed_s = 0.0
            self.stopped_at: float | None = None  # playhead where clear_buffer stopped it
            self.flushed = False
            self.timer: asyncio.TimerHandle | None = None
            self.finished: list[tuple[float, bool]] = []  # (playback_position, interrupted) per segment

        def played_s(self) -> float:
            return 0.0 if self.first_at is None else min(self.pushed_s, time.monotonic() - self.first_at)

        async def capture_frame(self, frame: Any) -> None:
            await super().capture_frame(frame)
            if self.first_at is None:
                self.first_at = time.monotonic()
                self.on_playback_started(created_at=time.time())
            self.audio += frame.data.tobytes()
            self.pushed_s += frame.samples_per_channel / frame.sample_rate

        def flush(self) -> None:
            super().flush()
            if self.first_at is None or self.flushed:
                return
            self.flushed = True
            if self.stopped_at is not None:
                self.finish(True)
            else:
                rest = self.pushed_s - self.played_s()
                self.timer = asyncio.get_running_loop().call_later(rest, self.finish, False)

        def clear_buffer(self) -> None:
            if self.first_at is None or self.stopped_at is not None:
                return
            self.stopped_at = self.played_s()
            if self.flushed:
                self.finish(True)

        def finish(self, interrupted: bool) -> None:
            if self.timer is not None:
                self.timer.cancel()
            position = self.stopped_at if interrupted and self.stopped_at is not None else self.pushed_s
            self.first_at, self.pushed_s, self.stopped_at, self.flushed, self.timer = None, 0.0, None, False, None
            self.segments.append(bytes(self.audio))
            self.audio = bytearray()
            self.finished.append((position, interrupted))
            self.on_playback_finished(playback_position=position, interrupted=interrupted)

    return Mic, Speaker


async def until_truthy(cond: Any, within: float) -> Any:
    async with asyncio.timeout(within):
        while not (value := cond()):  # noqa: ASYNC110  (plain state, no event to wait on)
            await asyncio.sleep(0.02)
    return value


@requires_espeak
async def test_spoken_question_spoken_answer_and_a_barge_in_that_truncates(server_factory):
    import aiohttp
    from livekit.agents import Agent, AgentSession
    from livekit.plugins import openai as lk_openai

    Mic, Speaker = devices()
    model = Recording(FakeBackend(answer_tokens=60, step_s=0.005))  # its speech fits one Whisper window
    with server_factory(model, **CONF) as addr:
        async with aiohttp.ClientSession() as http:
            llm = lk_openai.realtime.RealtimeModel(base_url=f"http://{addr}/v1", api_key="unused", http_session=http)
            mic, speaker = Mic(), Speaker()
            errors: list[Any] = []
            items: list[Any] = []
            async with AgentSession(llm=llm) as session:
                session.on("error", errors.append)
                session.on("conversation_item_added", lambda ev: items.append(ev.item))
                session.input.audio, session.output.audio = mic, speaker
                await session.start(Agent(instructions="Answer briefly."))
                sent = await tap_server_events(addr)
                mic.say(QUESTION)

                # the spoken answer plays until the server's voice is well ahead of the playhead
                def ahead() -> bool:
                    return speaker.played_s() >= 1.5 and speaker.pushed_s >= speaker.played_s() + 1.0

                await until_truthy(ahead, 90)
                mic.say(BARGE_IN)  # the user talks over it
                truncated = await until_truthy(
                    lambda: next((e for e in sent if e["type"] == "conversation.item.truncated"), None), 60
                )
                prompt = await until_truthy(
                    lambda: next((p for p in model.prompts if any(m["role"] == "assistant" for m in p)), None), 60
                )
                item_id = truncated["item_id"]
                kept = conversation_text(addr, item_id)
                users = await until_truthy(
                    lambda: [i for i in items if i.type == "message" and i.role == "user"][:2], 30
                )

    # LiveKit's interrupt sends response.cancel while the server's own cancel on speech_started is on its way:
    # the server answers as OpenAI does, and LiveKit ignores that one error (it reports none)
    refused = [e["error"] for e in sent if e["type"] == "error"]
    assert all(e["code"] == "response_cancel_not_active" for e in refused), refused
    assert not errors, errors
    assert word_error_rate(QUESTION, users[0].text_content or "") <= 0.25, users[0].text_content

    # a spoken answer with its transcript: LiveKit's record of it is the server's, and Whisper hears it
    reply = next(i for i in items if i.type == "message" and i.role == "assistant")
    assert reply.id == item_id and reply.interrupted
    full = transcript_of(sent, item_id)
    said = normalize_words(reply.text_content or "")
    assert said and normalize_words(full)[: len(said)] == said
    played_position, interrupted = speaker.finished[0]
    assert interrupted
    audio = speaker.segments[0]
    assert len(audio) / 48 >= 1500
    assert overlap(reply.text_content or "", heard(audio)) >= 0.5, reply.text_content

    # truncated where the speaker's playhead stood, and the conversation keeps only what was heard
    assert truncated["audio_end_ms"] == int(played_position * 1000)
    assert 1000 <= truncated["audio_end_ms"] < _ms_of(sent, item_id)
    kept_words, full_words = normalize_words(kept), normalize_words(full)
    assert 0 < len(kept_words) < len(full_words) and full_words[: len(kept_words)] == kept_words, (kept, full)
    cut = int(truncated["audio_end_ms"] * 48) // 2 * 2
    assert overlap(kept, heard(audio[:cut])) >= 0.5, kept
    assert [m["content"] for m in prompt if m["role"] == "assistant"][-1].strip() == kept.strip()


def _ms_of(sent: list[dict[str, Any]], item_id: str) -> float:
    import base64

    return sum(
        len(base64.b64decode(e["delta"])) / 48
        for e in sent
        if e["type"] == "response.output_audio.delta" and e["item_id"] == item_id
    )
