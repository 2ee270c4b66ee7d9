"""A session's input cleaner: microphone pcm16 at the session's rate → the same with echo and noise removed.

Pure and synchronous (the gateway runs it off the event loop). The stages run at 16 kHz on 10 ms frames,
each a ``Stage``: the echo canceller (``processors.echo``, the server's own played audio as reference) then
the noise suppressor (WebRTC's, ``audio.input.noise_reduction``). While no stage has work (no suppressor and
nothing played within the echo's reach) the input comes back byte for byte and nothing is resampled; while
the stages run but none changes a frame (an echo canceller that has found no echo), it comes back byte for
byte too, as late as the cleaned audio would be.

Shapes: ``push`` takes and returns little-endian pcm16 bytes at ``rate``; stages see int16 ``[FRAME]``.
"""

from __future__ import annotations

import time
from typing import Literal, Protocol

import numpy as np
import soxr

from .echo import FRAME, RATE, EchoCanceller, EchoConfig

NoiseReduction = Literal["near_field", "far_field"]
# WebRTC's suppression levels (0-4): a close microphone hears its speaker well above the noise, a far one
# (speakerphone, kiosk, robot) hears more of the room and needs the stronger setting
NS_LEVEL: dict[str, int] = {"near_field": 2, "far_field": 3}


class Stage(Protocol):
    """One cleaning step on 10 ms frames at 16 kHz; ``pos`` is the frame's microphone sample index."""

    name: str
    touched: int  # frames it has worked on so far (one it hands back as it came is not counted)

    @property
    def passing(self) -> bool:
        """Whether it hands frames back as they came for now (an echo canceller that has found no echo)."""
        ...

    def active(self, pos: int, n: int) -> bool:
        """Whether frames over ``[pos, pos + n)`` need this stage (False: it may be skipped)."""
        ...

    def process(self, frame: np.ndarray, pos: int) -> np.ndarray:
        """int16 ``[FRAME]`` → int16 ``[FRAME]``."""
        ...

    def close(self) -> None: ...


class NoiseSuppressor:
    """WebRTC's noise suppressor (``webrtc-noise-gain``: webrtc-audio-processing in its wheel), AGC off."""

    name = "noise"

    def __init__(self, kind: NoiseReduction, level: int | None = None):
        from webrtc_noise_gain import AudioProcessor  # a 27 MB native library: loaded when a session asks

        self.kind = kind
        self._ap = AudioProcessor(0, NS_LEVEL[kind] if level is None else level)
        self.touched = 0

    @property
    def passing(self) -> bool:
        return False

    def active(self, pos: int, n: int) -> bool:
        return True

    def process(self, frame: np.ndarray, pos: int) -> np.ndarray:
        self.touched += 1
        out = self._ap.Process10ms(np.ascontiguousarray(frame, dtype="<i2").tobytes()).audio
        cleaned: np.ndarray = np.frombuffer(out, dtype="<i2").copy()
        return cleaned

    def close(self) -> None:
        pass


class InputCleaner:
    """The stages of one session in order, with resampling around them and the CPU each one spent."""

    def __init__(
        self,
        rate: int,
        echo: EchoConfig | None = None,
        noise: NoiseReduction | None = None,
        echo_on: bool = True,
        noise_level: int | None = None,  # WebRTC's level (0-4) instead of ``NS_LEVEL[noise]`` (the bench's)
    ):
        self.rate = rate
        self.echo = EchoCanceller(echo) if echo_on else None
        self.noise = NoiseSuppressor(noise, noise_level) if noise is not None else None
        self.stages: list[Stage] = [s for s in (self.echo, self.noise) if s is not None]
        self.cpu_s: dict[str, float] = {s.name: 0.0 for s in self.stages}  # thread CPU per stage
        self.cpu_s["resample"] = 0.0
        self.received = 0  # microphone samples at 16 kHz received so far (the playout clock's unit)
        self._in_samples = 0  # … counted at ``rate``, so the 16 kHz count never drifts by rounding
        self._pos = 0  # position of the next frame the stages see
        self._pending: np.ndarray = np.zeros(0, dtype=np.int16)  # 16 kHz samples short of a frame
        self._down: soxr.ResampleStream | None = None  # rate → 16 kHz while streaming
        self._up: soxr.ResampleStream | None = None  # 16 kHz → rate
        self._far: dict[int, soxr.ResampleStream] = {}  # played audio at its rate → 16 kHz
        # the input while streaming, not yet handed back: the resamplers' output is aligned sample for sample
        # with their input, so while no stage changes anything the same count of these goes out instead
        self._raw = bytearray()

    @property
    def streaming(self) -> bool:
        """Whether input goes through the stages now (False: it passes untouched)."""
        return self._down is not None

    def idle(self, n_bytes: int) -> bool:
        """Whether a frame of ``n_bytes`` would come back unchanged (cheap: safe to ask between pushes)."""
        n16 = self._count(n_bytes // 2)[1]
        return not self.streaming and not any(s.active(self.received, n16) for s in self.stages)

    def _count(self, n: int) -> tuple[int, int]:
        total = self._in_samples + n
        return total, total * RATE // self.rate - self.received

    def push(self, raw: bytes) -> bytes:
        """A microphone frame (pcm16 at ``rate``) → cleaned pcm16 at ``rate`` (a few ms later while streaming)."""
        self._in_samples, n16 = self._count(len(raw) // 2)
        at = self.received
        self.received += n16
        busy = any(s.active(at, n16) for s in self.stages)
        if not self.streaming:
            if not busy:
                return raw
            self._start(at)
        self._raw += raw
        before = self._untouched()
        out = self._run(np.frombuffer(raw, dtype="<i2"), last=False)
        out = self._as_came(out, before)
        if not busy and not any(s.active(self._pos, FRAME) for s in self.stages):
            before = self._untouched()
            tail = self._run(np.zeros(0, dtype=np.int16), last=True)  # nothing left to clean: flush, pass through
            out += self._as_came(tail, before, rest=True)
            self._down = self._up = None
            self._raw.clear()
        return out

    def _untouched(self) -> int | None:
        """Frames the stages have worked on; None while one works on every frame (nothing passes as it came)."""
        return sum(s.touched for s in self.stages) if all(s.passing for s in self.stages) else None

    def _as_came(self, cleaned: bytes, before: int | None, rest: bool = False) -> bytes:
        """``cleaned``, or the same stretch of the input as it came when no stage changed a frame of it: an
        echo canceller that has found no echo leaves the microphone byte for byte, not resampled twice."""
        n = len(self._raw) if rest else len(cleaned)
        came = bytes(self._raw[:n])
        del self._raw[:n]
        return came if before is not None and self._untouched() == before else cleaned

    def played(self, pcm: bytes, rate: int) -> None:
        """``pcm`` (pcm16 at ``rate``) went out to the client now: it plays from the microphone's present on."""
        if self.echo is None or not pcm:
            return
        rs = self._far.get(rate)
        if rs is None:
            rs = self._far[rate] = soxr.ResampleStream(rate, RATE, 1, dtype="int16")
        x = np.frombuffer(pcm, dtype="<i2")
        samples = x if rate == RATE else rs.resample_chunk(x)
        self.echo.far.schedule(samples, self.received)

    def stop_playback(self) -> None:
        """The reply stopped (cancelled): what was scheduled beyond the microphone's present never plays."""
        if self.echo is not None:
            self.echo.far.stop(self.received)

    def _start(self, at: int) -> None:
        self._pos, self._pending = at, np.zeros(0, dtype=np.int16)
        if self.rate != RATE:
            # soxr's LQ: a steady 1-2 ms behind its input; HQ and MQ hold 20-60 ms back in blocks, which the
            # VAD would hear as a later end of speech. Speech has little above LQ's passband edge anyway
            self._down = soxr.ResampleStream(self.rate, RATE, 1, dtype="int16", quality="LQ")
            self._up = soxr.ResampleStream(RATE, self.rate, 1, dtype="int16", quality="LQ")
        else:
            self._down = self._up = _SAME

    def _run(self, x: np.ndarray, last: bool) -> bytes:
        t0 = time.thread_time()
        assert self._down is not None and self._up is not None
        x16 = self._down.resample_chunk(x, last=last)
        buf = np.concatenate([self._pending, x16]) if len(self._pending) else x16
        if last and len(buf) % FRAME:
            buf = np.concatenate([buf, np.zeros(FRAME - len(buf) % FRAME, dtype=np.int16)])
        n = len(buf) // FRAME * FRAME
        self._pending = buf[n:].copy()
        t1 = time.thread_time()
        frames = [buf[i : i + FRAME] for i in range(0, n, FRAME)]
        for stage in self.stages:
            t = time.thread_time()
            frames = [stage.process(f, self._pos + k * FRAME) for k, f in enumerate(frames)]
            self.cpu_s[stage.name] += time.thread_time() - t
        self._pos += n
        t2 = time.thread_time()
        cleaned = np.concatenate(frames) if frames else np.zeros(0, dtype=np.int16)
        out = self._up.resample_chunk(cleaned, last=last)
        self.cpu_s["resample"] += (t1 - t0) + (time.thread_time() - t2)
        return bytes(np.asarray(out, dtype="<i2").tobytes())

    def close(self) -> None:
        for s in self.stages:
            s.close()


class _Same:
    """A resampler between equal rates."""

    def resample_chunk(self, x: np.ndarray, last: bool = False) -> np.ndarray:
        return x


_SAME = _Same()
