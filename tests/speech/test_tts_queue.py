"""TTS scheduling across sessions: first chunks before later ones (the pure queue, and the real worker threads)."""

from __future__ import annotations

import asyncio
import os
import threading
from types import SimpleNamespace

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


async def test_a_new_replys_first_chunk_waits_only_for_the_synthesis_running():
    voice = GatedVoice()
    svc = SpeechService({"v": voice}, SpeechSettings("audio/pcm", "v", 1.0), workers=1)
    s = SpeechSettings("audio/pcm", "v", 1.0)
    try:
        running = asyncio.ensure_future(svc.run("a0", s, 0))
        assert await asyncio.to_thread(voice.started.wait, 30)
        later = [asyncio.ensure_future(svc.run(f"a{i}", s, i)) for i in range(1, 4)]  # another session's chunks
        dropped = asyncio.ensure_future(svc.run("gone", s, 0))
        first = asyncio.ensure_future(svc.run("b0", s, 0))  # a new reply's first chunk, queued last
        await asyncio.wait_for(queued(svc, 5), 30)
        dropped.cancel()  # its caller stopped waiting: never synthesized
        await asyncio.wait([dropped], timeout=30)  # the cancel has reached the queued job by then
        voice.release.set()
        results = await asyncio.wait_for(asyncio.gather(running, first, *later), 30)
        assert voice.said == ["a0", "b0", "a1", "a2", "a3"]
        assert all(r.audio for r in results)
    finally:
        voice.release.set()
        svc.close()


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
