"""The server's voices and the threads that synthesize with them (one pool for every session).

Synthesis never runs on the event loop nor on the engine's decode thread: it runs on
``audio.output.workers`` threads of its own, each onnxruntime call on ``audio.output.threads``
cores (onnxruntime and espeak-ng release the GIL while they compute; docs/SPEECH.md has the
measurements behind threads rather than a process). Waiting syntheses are taken first chunks
first, then API keys in turn (``gateway.voice.tts_queue``), and no key's long ``/v1/audio/speech``
request holds the others' voices.

A reply's first chunks are what a listener waits for, before the reply has any lead: besides the
``audio.output.workers``, one more thread takes only those (and short first pieces of requests). So a first
chunk never waits behind a long request's piece that a worker is running, only behind another first
chunk; the two threads then share the cores for the piece's length (hundreds of ms at most: pieces are
``audio.output.max_piece_chars`` long).

With ``audio.output.nice`` the workers run that much below the decode's priority (``gateway.core.workers``):
a reply's later chunks have seconds of lead (``gateway.voice.pacing``), so they can wait for the
scheduler, and llama.cpp's decode threads, which wait on each other at every step, are preempted
less. The first-chunk thread stays at normal priority.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from models.cores import CORES
from processors.audio_formats import encode

from ..core.config import SpeechConfig
from ..core.workers import yield_to_decoding
from .speech_actions import SpeechSettings
from .speech_budget import SpeechBudget
from .tts_queue import FIRST_CHUNKS, SynthesisQueue

log = logging.getLogger("stream_omni.speech")


@dataclass(frozen=True)
class Synthesis:
    """A text's audio in a wire format, and where each of its words ends (ms)."""

    audio: bytes
    word_ends_ms: tuple[float, ...]


_Job = tuple[Future[Synthesis], str, SpeechSettings]
# FIRST_CHUNKS: a reply's chunks that the first-chunk thread also takes: the first plays while the next two are
# made, and by then the reply has the seconds of lead that let later chunks wait for a worker


@dataclass
class SpeechService:
    voices: dict[str, Any]  # name → processors.speech.PiperSpeaker (or anything with rate and synthesize)
    default: SpeechSettings
    workers: int = 1  # synthesis threads
    nice: int = 0  # how far below the process's priority the workers run (not the first-chunk thread)
    on_first_chunk: Callable[[float], None] | None = None  # seconds a reply's first chunk took, queued → made
    # /v1/audio/speech per key: requests at once and characters per minute (audio.output.http_*_per_key)
    budget: SpeechBudget = field(default_factory=lambda: SpeechBudget(2, 8192))
    max_piece_chars: int = 200  # the longest text one /v1/audio/speech synthesis takes (audio.output.max_piece_chars)
    _queue: SynthesisQueue[_Job] = field(default_factory=SynthesisQueue, init=False)
    _ready: threading.Condition = field(default_factory=threading.Condition, init=False)
    _closed: bool = field(default=False, init=False)
    threads: list[threading.Thread] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        kinds: list[tuple[str, int | None, int]] = [(f"tts_{i}", None, self.nice) for i in range(self.workers)]
        # a reply's first chunks, before it has any lead: never behind a running piece, at the decode's priority
        kinds.append(("tts_first", FIRST_CHUNKS - 1, 0))
        for name, max_rank, nice in kinds:
            thread = threading.Thread(target=self._work, args=(max_rank, nice), name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

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

    async def run(
        self, text: str, settings: SpeechSettings, rank: int = 0, owner: str = "", bulk: bool = False
    ) -> Synthesis:
        """``text`` synthesized on a worker; ``rank``: the chunk's index in its reply (first chunks go first);
        ``owner``: the API key digest whose turn it takes; ``bulk``: a piece of an HTTP request (never urgent).
        Cancelling the awaiting task before a worker takes the job drops it unsynthesized."""
        fut: Future[Synthesis] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("speech service closed")
            self._queue.put((fut, text, settings), rank, owner, bulk, len(text))
            self._ready.notify_all()  # a first-chunk thread waits only for a reply's first chunks: wake every kind
        t0 = time.perf_counter()
        out = await asyncio.wrap_future(fut)
        if rank == 0 and not bulk and self.on_first_chunk is not None:
            self.on_first_chunk(time.perf_counter() - t0)
        return out

    def _work(self, max_rank: int | None, nice: int) -> None:
        """Take jobs of rank ≤ ``max_rank`` (None: any) at ``nice`` below the process's priority."""
        if nice > 0:
            yield_to_decoding(nice)
        while True:
            with self._ready:
                while (job := self._queue.take(max_rank)) is None and not self._closed:
                    self._ready.wait()
                if self._closed:
                    if job is not None:
                        job[0].cancel()
                    return
            assert job is not None
            fut, text, settings = job
            if not fut.set_running_or_notify_cancel():
                continue  # its caller stopped waiting
            try:
                with CORES.lend():  # the LLM steps on a thread fewer meanwhile (models.cores)
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
    settings = SpeechSettings(config.format, config.voice, config.speed)
    budget = SpeechBudget(config.http_max_concurrent_per_key, config.http_chars_per_min_per_key)
    return SpeechService(
        voices, settings, config.workers, config.nice, budget=budget, max_piece_chars=config.max_piece_chars
    )
