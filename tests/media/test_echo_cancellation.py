"""The assistant's own reply played back into the microphone (a speakerphone) over a real server: with the
server's echo cancellation on (the default), the reply does not interrupt itself; with it off, it does. And a
client with no echo (a headset) that barges in at the start of the reply, while the canceller is still looking
for an echo, keeps every word of it."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable

import numpy as np
import pytest

from processors.asr import normalize_words, word_error_rate
from processors.speexdsp import available
from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from tests.conftest import requires_espeak
from tests.media.test_realtime_voice import pcm24
from tests.wsclient import RealtimeClient

pytestmark = [requires_espeak, pytest.mark.skipif(not available(), reason="libspeexdsp1 is not installed")]

RATE = 24_000
FRAME = 480  # 20 ms
ECHO_DB = -6.0
ROOM_DELAY_S = 0.12  # client playout buffer + sound across the room


class Speakerphone:
    """A client whose microphone hears its own loudspeaker: it plays each ``output_audio.delta`` from the
    moment it arrives (after what is already playing) and its microphone picks that up ``ROOM_DELAY_S``
    later at ``ECHO_DB``, with a reflection, on top of the user's own speech."""

    def __init__(self, c: RealtimeClient, echo_db: float | None = ECHO_DB):
        self.c = c
        self.echo_db = echo_db  # None: a headset, the microphone hears no loudspeaker
        self.sent = 0  # microphone samples sent
        self.play = np.zeros(0, dtype=np.float32)  # the loudspeaker, indexed by microphone sample
        self.events: list[dict] = []

    def heard(self, ev: dict) -> None:
        self.events.append(ev)
        if ev["type"] == "response.output_audio.delta":
            pcm = np.frombuffer(base64.b64decode(ev["delta"]), dtype="<i2").astype(np.float32) / 32768
            start = max(self.sent, len(self.play))
            self.play = np.concatenate([self.play, np.zeros(start - len(self.play), np.float32), pcm])

    def echo(self, n: int) -> np.ndarray:
        d, r = int(ROOM_DELAY_S * RATE), int(0.023 * RATE)
        out = np.zeros(n, np.float32)
        if self.echo_db is None:
            return out
        for lag, gain in ((d, 1.0), (d + r, 0.3)):
            lo, hi = self.sent - lag, self.sent - lag + n
            seg = self.play[max(lo, 0) : max(hi, 0)]
            if len(seg):
                out[max(0, -lo) : max(0, -lo) + len(seg)] += gain * seg
        return out * 10 ** (self.echo_db / 20)

    async def talk(self, user: np.ndarray, until: str | Callable[[dict], bool], limit_s: float = 90) -> dict | None:
        """Stream ``user`` (float32 at 24 kHz) then silence in real time, echo added, until an event of type
        ``until`` (or one it accepts) arrives (returned) or ``limit_s`` passes; every received event is kept."""
        wanted = until if callable(until) else lambda ev: ev["type"] == until
        loop = asyncio.get_running_loop()
        t0, k = loop.time(), 0
        while loop.time() - t0 < limit_s:
            mic = np.zeros(FRAME, np.float32)
            lo = k * FRAME
            if lo < len(user):
                part = user[lo : lo + FRAME]
                mic[: len(part)] += part
            mic += self.echo(FRAME) + np.random.default_rng(k).normal(0, 3e-4, FRAME).astype(np.float32)
            await self.c.ws.send((np.clip(mic, -1, 1) * 32767).astype("<i2").tobytes())
            self.sent += FRAME
            k += 1
            while True:  # what came meanwhile, without waiting past this frame's time
                wait = t0 + k * FRAME / RATE - loop.time()
                try:
                    ev = await self.c.recv(timeout=max(wait, 0.001))
                except TimeoutError:
                    break
                self.heard(ev)
                if wanted(ev):
                    return ev
        return None


async def run_call(addr: str, echo_cancellation: bool) -> Speakerphone:
    c = await RealtimeClient.connect(addr, query="")
    await c.until("session.created")
    audio_in: dict = {"turn_detection": {"type": "server_vad", "transcription_interval_ms": 0}}
    if not echo_cancellation:  # the client says it cancels its own echo, and it does not
        audio_in["echo_cancellation"] = {"type": "client"}
    await c.update_session({"output_modalities": ["audio"], "audio": {"input": audio_in}})
    phone = Speakerphone(c)
    user = np.frombuffer(pcm24(np.concatenate([silence(0.3), speak("Please open the kitchen window.")])), "<i2")
    assert await phone.talk(user.astype(np.float32) / 32768, "response.done") is not None, "no reply"
    return phone


@pytest.mark.parametrize("on", [True, False], ids=["cancelled", "not_cancelled"])
async def test_the_reply_played_into_the_microphone_interrupts_only_without_cancellation(server_factory, on):
    with server_factory(FakeBackend(answer_tokens=40), **{"speculative.drafter": "none"}) as addr:
        phone = await run_call(addr, on)
        done = next(e for e in phone.events if e["type"] == "response.done")
        kinds = [e["type"] for e in phone.events]
        spoken = sum(
            len(base64.b64decode(e["delta"])) // 2 for e in phone.events if e["type"] == "response.output_audio.delta"
        )
        assert spoken > (3 if on else 0.2) * RATE, f"the reply was too short to test its echo: {done['response']}"
        after_reply = kinds[kinds.index("response.output_audio.delta") :]
        started_after_reply = after_reply.count("input_audio_buffer.speech_started")
        if on:
            assert started_after_reply == 0, "the reply's own echo was taken for the user (a self-interruption)"
            assert done["response"]["status"] == "completed"
            token = phone.c.events[0]["resume"]["token"]
            echo = addr.call(lambda: addr.services.registry.sessions[token].media.clean.cleaner.echo)
            # it measured the echo path: the direct sound's -6 dB is a power gain of 0.25. The delay it found is
            # the room's ± what the server's playout clock cannot see (frames in flight, a stalled loop)
            assert echo.delay is not None and echo.gain2 is not None and 0.1 < echo.gain2 < 0.5
        else:
            assert started_after_reply >= 1, "without cancellation the echo should have barged in"
            assert done["response"]["status"] == "cancelled"
            assert done["response"]["status_details"]["reason"] == "turn_detected"
        await phone.c.close()


BARGE_IN = "Wait, stop, please turn on the lights instead."


async def test_a_headset_barging_in_as_the_reply_starts_keeps_its_first_word(server_factory):
    # the default session (no echo_cancellation given): the canceller runs, looking for the reply in the
    # microphone; the user starts talking 0.2 s into the reply, when it has not yet had a full window to judge
    with server_factory(FakeBackend(answer_tokens=40), **{"speculative.drafter": "none"}) as addr:
        c = await RealtimeClient.connect(addr, query="")
        await c.until("session.created")
        td = {"type": "server_vad", "transcription_interval_ms": 0}
        await c.update_session({"output_modalities": ["audio"], "audio": {"input": {"turn_detection": td}}})
        phone = Speakerphone(c, echo_db=None)
        question = np.frombuffer(pcm24(np.concatenate([silence(0.3), speak("Please open the kitchen window.")])), "<i2")
        assert await phone.talk(question.astype(np.float32) / 32768, "response.output_audio.delta") is not None
        barge = np.frombuffer(pcm24(np.concatenate([silence(0.2), speak(BARGE_IN)])), "<i2").astype(np.float32)
        asked = next(e["item_id"] for e in phone.events if e["type"] == "input_audio_buffer.committed")

        def barge_in_transcribed(ev: dict) -> bool:
            return ev["type"] == "conversation.item.input_audio_transcription.completed" and ev["item_id"] != asked

        done = await phone.talk(barge / 32768, barge_in_transcribed)
        assert done is not None, "the barge-in was never transcribed"
        token = phone.c.events[0]["resume"]["token"]
        echo = addr.call(lambda: addr.services.registry.sessions[token].media.clean.cleaner.echo)
        await phone.c.close()
    reply = next(e for e in phone.events if e["type"] == "response.done")
    assert reply["response"]["status_details"]["reason"] == "turn_detected"  # it did barge in
    words = normalize_words(done["transcript"])
    assert words[:1] == ["wait"] and word_error_rate(BARGE_IN, done["transcript"]) <= 0.25, done["transcript"]
    # the canceller was there, found no echo, and left the microphone as it came
    assert echo is not None and not echo.presence.found and echo.gated == 0
