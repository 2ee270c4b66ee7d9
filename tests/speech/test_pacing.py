"""A reply's synthesis stays a lead ahead of real-time playback (gateway.voice.pacing): the pure clock on
a fake clock, and the session's speaker, whose paced wait a cancel ends at once."""

from __future__ import annotations

import asyncio
import time

from gateway.voice.pacing import KEPT, PlaybackClock
from gateway.voice.speaker import Speaker
from gateway.voice.speech_actions import Speak, SpeechResult, SpeechSettings
from gateway.voice.synthesis import Synthesis

S = SpeechSettings()


def test_the_first_chunk_never_waits_and_later_ones_wait_for_the_playback_to_catch_up() -> None:
    clock = PlaybackClock(lead_s=3.0)
    assert clock.wait_s("r", now=100.0) == 0.0  # nothing sent yet
    clock.sent("r", 5.0, now=100.0)  # 5 s of audio out at once
    assert clock.wait_s("r", now=100.0) == 2.0  # 5 s ahead, 3 s allowed
    assert clock.wait_s("r", now=101.5) == 0.5
    assert clock.wait_s("r", now=103.0) == 0.0
    clock.sent("r", 4.0, now=103.0)  # 9 s sent, 3 s played: 6 ahead
    assert clock.wait_s("r", now=103.0) == 3.0
    assert clock.wait_s("other", now=103.0) == 0.0  # each reply has its own clock


def test_no_lead_means_no_pacing_and_old_replies_are_forgotten() -> None:
    assert PlaybackClock(lead_s=0).wait_s("r", 0.0) == 0.0
    unpaced = PlaybackClock(lead_s=0)
    unpaced.sent("r", 60.0, now=0.0)
    assert unpaced.wait_s("r", now=0.0) == 0.0
    clock = PlaybackClock(lead_s=1.0)
    for i in range(KEPT + 5):
        clock.sent(f"r{i}", 10.0, now=0.0)
    assert clock.wait_s("r0", now=0.0) == 0.0 and clock.wait_s(f"r{KEPT + 4}", now=0.0) == 9.0
    assert len(clock._replies) == KEPT


class TimedService:
    """Each text synthesizes (in the event loop) to ``seconds[text]`` of audio; records when each began."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds = seconds
        self.started: dict[str, float] = {}

    async def run(
        self, text: str, settings: SpeechSettings, rank: int = 0, owner: str = "", bulk: bool = False
    ) -> Synthesis:
        self.started[text] = time.monotonic()
        await asyncio.sleep(0)
        return Synthesis(b"\0\0" * int(24_000 * self.seconds[text]), ())  # audio/pcm: 24 kHz int16


class Inbox:
    def __init__(self) -> None:
        self.q: asyncio.Queue[tuple[float, SpeechResult]] = asyncio.Queue()

    def __call__(self, r: SpeechResult) -> None:
        self.q.put_nowait((time.monotonic(), r))

    async def next(self) -> tuple[float, SpeechResult]:
        return await asyncio.wait_for(self.q.get(), 5)


async def test_the_next_chunk_is_synthesized_only_once_the_audio_ahead_is_within_the_lead() -> None:
    svc, inbox = TimedService({"one": 1.0, "two": 0.1}), Inbox()
    sp = Speaker(svc, inbox, lead_s=0.6)  # type: ignore[arg-type]
    sp.submit(Speak("r", 0, "one", S))
    sp.submit(Speak("r", 1, "two", S))
    sent_at, first = await inbox.next()
    _, second = await inbox.next()
    assert (first.index, second.index) == (0, 1)
    # 1 s of audio out, 0.6 s allowed ahead: "two" waited for 0.4 s of playback (a lower bound: never early)
    assert svc.started["two"] - sent_at >= 0.4 - 0.02
    sp.close()


async def test_a_cancel_ends_a_paced_wait_at_once_and_the_next_reply_speaks() -> None:
    svc, inbox = TimedService({"long": 60.0, "rest": 1.0, "next": 1.0}), Inbox()
    sp = Speaker(svc, inbox, lead_s=1.0)  # type: ignore[arg-type]
    sp.submit(Speak("r1", 0, "long", S))
    sp.submit(Speak("r1", 1, "rest", S))  # would wait ~59 s for the playback
    await inbox.next()
    sp.cancel("r1")
    sp.submit(Speak("r2", 0, "next", S))
    _, got = await inbox.next()  # within the 5 s timeout: the wait did not run its course
    assert got.response_id == "r2" and "rest" not in svc.started
    sp.close()


async def test_a_paced_chunk_goes_as_soon_as_the_engine_stops_decoding() -> None:
    svc, inbox = TimedService({"long": 60.0, "rest": 1.0}), Inbox()
    busy, looks, looked = True, 0, asyncio.Event()

    def decoding() -> bool:
        nonlocal looks
        looks += 1
        if looks >= 3:
            looked.set()
        return busy

    sp = Speaker(svc, inbox, lead_s=1.0, decoding=decoding)  # type: ignore[arg-type]
    sp.submit(Speak("r", 0, "long", S))
    sp.submit(Speak("r", 1, "rest", S))  # 59 s ahead of playback: waits while the engine decodes
    await inbox.next()
    await asyncio.wait_for(looked.wait(), 5)  # it looked at the engine three times, and waited on
    assert "rest" not in svc.started
    busy = False  # the engine idles: the cores are free, the chunk need not wait for playback
    _, got = await inbox.next()  # within 5 s, not 59
    assert got.index == 1
    sp.close()
