"""The server's voices and the threads that synthesize with them (one pool for every session).

Synthesis never runs on the event loop nor on the engine's decode thread: it runs on
``audio.output.workers`` threads of its own, each onnxruntime call on ``audio.output.threads``
cores (onnxruntime and espeak-ng release the GIL while they compute; docs/SPEECH.md has the
measurements behind threads rather than a process).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from processors.audio_formats import encode

from .config import SpeechConfig
from .realtime.speech_out import SpeechSettings

log = logging.getLogger("stream_omni.speech")


@dataclass(frozen=True)
class Synthesis:
    """A text's audio in a wire format, and where each of its words ends (ms)."""

    audio: bytes
    word_ends_ms: tuple[float, ...]


@dataclass
class SpeechService:
    voices: dict[str, Any]  # name → processors.speech.PiperSpeaker (or anything with rate and synthesize)
    default: SpeechSettings
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="tts"))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.voices)

    def synthesize(self, text: str, settings: SpeechSettings) -> Synthesis:
        """Blocking: ``text`` in ``settings``' voice, speed and format (run it on ``pool``)."""
        if not text.strip():
            return Synthesis(b"", ())
        voice = self.voices.get(settings.voice) or self.voices[self.default.voice]
        spoken = voice.synthesize(text, settings.speed)
        ends = tuple(e * 1000.0 / spoken.rate for e in spoken.word_ends)
        return Synthesis(encode(spoken.audio, spoken.rate, settings.format), ends)

    async def run(self, text: str, settings: SpeechSettings) -> Synthesis:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.synthesize, text, settings)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def load_speech(config: SpeechConfig) -> SpeechService | None:
    """Every configured voice, warmed; None when speech output is off."""
    if not config.enabled:
        return None
    from processors.speech import SpeechError, load_voice

    try:
        voices = {name: load_voice(name, spec, config.threads) for name, spec in config.voices.items()}
    except SpeechError as exc:  # the server still answers, in text (session.created says so)
        log.warning("speech output is off: %s", exc.message)
        return None
    pool = ThreadPoolExecutor(config.workers, thread_name_prefix="tts")
    return SpeechService(voices, SpeechSettings(config.format, config.voice, config.speed), pool)
