"""Voice sessions share one Whisper worker: passes of several sessions batched, gating passes first, and
past ``audio.max_concurrent_turns`` a new voice session is told ``server_busy`` while text still works."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from gateway.voice.asr_queue import QueueConfig
from gateway.voice.asr_worker import SEAT_IDLE_S, AsrWorker, PassShed
from models.cores import CORES
from processors.asr import DEFAULT_HEADROOM_S, AsrConfig, encoder_frames, word_error_rate
from testkit.espeak import silence, speak
from tests.conftest import requires_espeak
from tests.media.test_realtime_voice import pcm24, stream
from tests.wsclient import RealtimeClient


class GatedAsr:
    """A transcriber whose first call blocks until released, recording each call's batch."""

    config = AsrConfig()

    def __init__(self) -> None:
        self.calls: list[list[float]] = []  # the first sample of each clip: which pass it was
        self.entered = threading.Event()
        self.release = threading.Event()

    def transcribe(self, audio: np.ndarray) -> str:
        return self.transcribe_batch([audio])[0]

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        self.calls.append([float(a[0]) for a in audios])
        self.entered.set()
        assert self.release.wait(30)
        return [f"pass {int(a[0])}" for a in audios]


def clip(n: int) -> np.ndarray:
    return np.full(16_000, float(n), np.float32)


async def test_passes_of_several_sessions_share_one_call_gating_first_and_stale_partials_are_shed() -> None:
    asr = GatedAsr()
    clock = [0.0]
    worker = AsrWorker(asr, capacity=8, config=QueueConfig(max_batch=4, partial_max_wait_s=0.5), clock=lambda: clock[0])
    try:
        _, first = worker.submit("a", "partial", clip(1))  # runs at once, alone, and blocks the thread
        assert await asyncio.to_thread(asr.entered.wait, 10)
        _, stale = worker.submit("b", "partial", clip(2))
        clock[0] = 0.2
        _, g1 = worker.submit("c", "pause", clip(3))
        _, g2 = worker.submit("d", "final", clip(4))
        _, fresh = worker.submit("e", "partial", clip(5))
        clock[0] = 0.6  # partial 2 has waited 0.6 s when the worker comes free; partial 5 0.4 s
        asr.release.set()
        assert await asyncio.wait_for(first, 10) == "pass 1"
        assert await asyncio.wait_for(g1, 10) == "pass 3"
        assert await asyncio.wait_for(g2, 10) == "pass 4"
        assert await asyncio.wait_for(fresh, 10) == "pass 5"
        try:
            await asyncio.wait_for(stale, 10)
            raise AssertionError("the stale partial ran")
        except PassShed:
            pass
        assert asr.calls == [[1.0], [3.0, 4.0], [5.0]]  # the two gating passes in one call, before the partial
        assert worker.queue.stats.shed == 1
    finally:
        worker.close()


async def test_a_withdrawn_pass_raises_pass_shed_and_never_runs_and_a_running_one_holds_a_core() -> None:
    asr = GatedAsr()
    worker = AsrWorker(asr, capacity=1)
    try:
        _, running = worker.submit("a", "final", clip(1))
        assert await asyncio.to_thread(asr.entered.wait, 10)
        assert CORES.lent == 1  # inside the Whisper call: the LLM leaves that core alone
        ticket, queued = worker.submit("a", "partial", clip(2))
        assert worker.withdraw(ticket)
        asr.release.set()
        assert await asyncio.wait_for(running, 10) == "pass 1"
        try:
            await asyncio.wait_for(queued, 10)
            raise AssertionError("the withdrawn pass ran")
        except PassShed:
            pass
        assert asr.calls == [[1.0]]
        assert CORES.lent == 0
    finally:
        worker.close()


def test_seats_are_held_while_audio_comes_and_freed_by_silence_or_close() -> None:
    clock = [0.0]
    worker = AsrWorker(GatedAsr(), capacity=2, clock=lambda: clock[0])
    assert worker.seat("a") and worker.seat("b") and worker.seat("a")
    assert not worker.seat("c")
    worker.unseat("a")
    assert worker.seat("c") and worker.seated == 2
    clock[0] = SEAT_IDLE_S  # b and c went quiet SEAT_IDLE_S ago: still theirs
    assert not worker.seat("d")
    assert worker.seat("c")  # c speaks on
    clock[0] += 0.1  # b has been silent longer than SEAT_IDLE_S: its seat goes to d
    assert worker.seat("d") and worker.seated == 2
    assert not worker.seat("b")
    worker.close()


@pytest.mark.real_model  # Whisper tiny.en
@requires_espeak
@pytest.mark.parametrize("headroom", [None, DEFAULT_HEADROOM_S])
def test_a_batch_gives_each_clip_the_words_it_gets_alone(headroom: float | None) -> None:
    from processors.asr import load_asr

    asr = load_asr(AsrConfig(encoder_headroom_s=headroom))
    # clips of one encoder length (12 s of input with the default headroom, 30 s without): a batch
    # pads each to its longest, so only then is every clip's input the one it gets alone
    texts = ["Please open the kitchen window.", "My favorite color is blue.", "Turn the music down a little."]
    clips = [speak(t) for t in texts]
    assert len({encoder_frames(c.size, headroom) for c in clips}) == 1
    alone = [asr.transcribe(c) for c in clips]
    batched = asr.transcribe_batch([clips[0], np.zeros(0, np.float32), clips[1], clips[2]])  # type: ignore[attr-defined]
    assert batched == [alone[0], "", alone[1], alone[2]]
    assert all(word_error_rate(t, a) <= 0.25 for t, a in zip(texts, alone, strict=True)), alone


@requires_espeak
async def test_past_capacity_a_new_voice_session_is_told_server_busy_and_text_still_works(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.max_concurrent_turns": 1}) as addr:
        a = await RealtimeClient.connect(addr)
        b = await RealtimeClient.connect(addr)
        await a.until("session.created")
        await b.until("session.created")
        await stream(b, pcm24(silence(1.0)))  # silence takes no seat …
        await stream(a, pcm24(np.concatenate([silence(0.3), speak("Please open the kitchen window.")])))
        await a.until("input_audio_buffer.speech_started", timeout=60)  # … speech does: a has the one seat
        await stream(b, pcm24(np.concatenate([silence(0.3), speak("Please turn on the lights.")])))
        err = await b.until("error", timeout=30)
        assert err["error"]["code"] == "server_busy"
        assert "1 voice session speaking at once" in err["error"]["message"]
        assert not any(e["type"] == "input_audio_buffer.speech_started" for e in b.events)  # b was not heard
        done = await b.ask("Say hi.")  # text sessions are still served
        assert done["response"]["status"] in ("completed", "incomplete")
        await a.close()  # its socket goes (its session waits for a resume): the seat frees, b's speech is heard
        await stream(b, pcm24(np.concatenate([silence(0.3), speak("Please open the kitchen window."), silence(1.0)])))
        await b.until("input_audio_buffer.speech_started", timeout=60)
        await b.close()
