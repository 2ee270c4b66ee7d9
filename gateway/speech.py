"""The server's voices and the threads that synthesize with them (one pool for every session).

Synthesis never runs on the event loop nor on the engine's decode thread: it runs on
``audio.output.workers`` threads of its own, each onnxruntime call on ``audio.output.threads``
cores (onnxruntime and espeak-ng release the GIL while they compute; docs/SPEECH.md has the
measurements behind threads rather than a process). Waiting syntheses are taken first chunks
first (``gateway.tts_queue``), so a reply's first audio waits only for the syntheses running.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from processors.audio_formats import encode

from .config import SpeechConfig
from .realtime.speech_out import SpeechSettings
from .tts_queue import SynthesisQueue

log = logging.getLogger("stream_omni.speech")


@dataclass(frozen=True)
class Synthesis:
    """A text's audio in a wire format, and where each of its words ends (ms)."""

    audio: bytes
    word_ends_ms: tuple[float, ...]


_Job = tuple[Future[Synthesis], str, SpeechSettings]


@dataclass
class SpeechService:
    voices: dict[str, Any]  # name → processors.speech.PiperSpeaker (or anything with rate and synthesize)
    default: SpeechSettings
    workers: int = 1  # synthesis threads
    _queue: SynthesisQueue[_Job] = field(default_factory=SynthesisQueue, init=False)
    _ready: threading.Condition = field(default_factory=threading.Condition, init=False)
    _closed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        for i in range(self.workers):
            threading.Thread(target=self._work, name=f"tts_{i}", daemon=True).start()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.voices)

    def synthesize(self, text: str, settings: SpeechSettings) -> Synthesis:
        """Blocking: ``text`` in ``settings``' voice, speed and format (the workers run it)."""
        if not text.strip():
            return Synthesis(b"", ())
        voice = self.voices.get(settings.voice) or self.voices[self.default.voice]
        spoken = voice.synthesize(text, settings.speed)
        ends = tuple(e * 1000.0 / spoken.rate for e in spoken.word_ends)
        return Synthesis(encode(spoken.audio, spoken.rate, settings.format), ends)

    async def run(self, text: str, settings: SpeechSettings, rank: int = 0) -> Synthesis:
        """``text`` synthesized on a worker; ``rank``: the chunk's index in its reply (first chunks go first).
        Cancelling the awaiting task before a worker takes the job drops it unsynthesized."""
        fut: Future[Synthesis] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("speech service closed")
            self._queue.put((fut, text, settings), rank)
            self._ready.notify()
        return await asyncio.wrap_future(fut)

    def _work(self) -> None:
        while True:
            with self._ready:
                while not len(self._queue) and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                job = self._queue.take()
            assert job is not None
            fut, text, settings = job
            if not fut.set_running_or_notify_cancel():
                continue  # its caller stopped waiting
            try:
                fut.set_result(self.synthesize(text, settings))
            except Exception as exc:  # the caller's chunk fails; the worker goes on
                fut.set_exception(exc)

    def close(self) -> None:
        with self._ready:
            self._closed = True
            while (job := self._queue.take()) is not None:
                job[0].cancel()
            self._ready.notify_all()


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
    return SpeechService(voices, SpeechSettings(config.format, config.voice, config.speed), config.workers)
