"""The assistant's own reply played back into the microphone (a speakerphone) over a real server: with the
server's echo cancellation on (the default), the reply does not interrupt itself; with it off, it does."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest

from processors.speexdsp import available
from testkit.fake_backend import FakeBackend
from testkit.speech import silence, speak
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

    def __init__(self, c: RealtimeClient):
        self.c = c
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
        for lag, gain in ((d, 1.0), (d + r, 0.3)):
            lo, hi = self.sent - lag, self.sent - lag + n
            seg = self.play[max(lo, 0) : max(hi, 0)]
            if len(seg):
                out[max(0, -lo) : max(0, -lo) + len(seg)] += gain * seg
        return out * 10 ** (ECHO_DB / 20)

    async def talk(self, user: np.ndarray, until: str, limit_s: float = 90) -> dict | None:
        """Stream ``user`` (float32 at 24 kHz) then silence in real time, echo added, until an event of type
        ``until`` arrives (returned) or ``limit_s`` passes; every received event is kept."""
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
                if ev["type"] == until:
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
