"""Echo cancellation with the server's own output as the reference: the played audio on the microphone's clock,
the echo delay found by cross-correlation, and libspeexdsp's adaptive filter. Pure (no I/O, no asyncio).

The server knows exactly what the client plays: the reply audio it sent. Its playout clock is the one speech
pacing keeps (``gateway.voice.pacing``): a reply starts playing when its first audio goes out and plays in
real time. Here that clock is counted in microphone samples instead of wall-clock seconds: a chunk sent when
the session had received ``m`` microphone samples starts playing at sample ``m`` (or where the audio before it
ends), so network and frame jitter do not move the reference. What is left, the client's playout buffer and
the room, is one delay, found by GCC-PHAT between the microphone and the reference (``estimate_delay``), and
a few reflections, which the adaptive filter learns over ``tail_ms`` after that delay.

Shapes: every array is int16 at ``RATE``; positions are microphone sample indices at ``RATE``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .echo_presence import Estimate, Presence, PresenceConfig, acting, observe, probing, sighting
from .speexdsp import SpeexEcho

RATE = 16_000  # the rate the cleaning stages run at (the VAD's and Whisper's)
FRAME = 160  # 10 ms: one speex frame


@dataclass(frozen=True)
class EchoConfig:
    """How the echo canceller searches and models the echo path."""

    tail_ms: int = 128  # echo the adaptive filter models after the estimated delay (room reflections)
    max_delay_ms: int = 400  # longest echo delay searched (client playout buffer + sound in the room)
    margin_ms: int = 16  # the filter starts this much before the estimated delay (estimation error)
    window_ms: int = 500  # audio one delay estimate correlates
    every_ms: int = 250  # a new estimate this often while the reference plays and the echo is known
    # until an echo is found the microphone passes untouched, so a speakerphone's echo leaks until then: at the
    # start of each reply the search runs this often, over the last probe_window_ms (from probe_min_ms of
    # microphone on), for probe_for_ms (the VAD takes a speech start from ~60 ms of echo; a reply's echo is
    # back within max_delay_ms)
    probe_ms: int = 10
    probe_window_ms: int = 100
    probe_min_ms: int = 60
    probe_for_ms: int = 1_500
    presence: PresenceConfig = field(default_factory=PresenceConfig)  # when a correlation peak is an echo
    gate_db: float = -40.0  # what the echo gate does to a frame it judges to be echo only
    slack_ms: int = 64  # the gate's reach beyond the filter's window both ways (the delay moving under load)
    headroom_db: float = 0.0  # echo the gate allows for above the direct path's (6 dB cut a barge-in's words)
    # … and while the filter is new (its first settle_ms after the echo is found or the filter restarts), when
    # its output is nearly the raw echo and the reflections add up to more than the direct path alone
    settle_db: float = 6.0
    settle_ms: int = 2_000


class FarEnd:
    """The played reference on the microphone's sample clock: chunks scheduled back to back, read by position."""

    def __init__(self) -> None:
        self._chunks: deque[tuple[int, np.ndarray]] = deque()  # (first sample's position, int16 samples)
        self.end = 0  # position after the last scheduled sample

    def schedule(self, samples: np.ndarray, at: int) -> None:
        """``samples`` start playing at ``at``, or where the audio already scheduled ends if that is later."""
        if len(samples) == 0:
            return
        start = max(at, self.end)
        self._chunks.append((start, np.asarray(samples, dtype=np.int16)))
        self.end = start + len(samples)

    def stop(self, at: int) -> None:
        """Playback stopped at ``at`` (the reply was cancelled): nothing scheduled after it plays."""
        kept: deque[tuple[int, np.ndarray]] = deque()
        for start, s in self._chunks:
            if start < at:
                kept.append((start, s[: at - start]))
        self._chunks = kept
        self.end = min(self.end, at)

    def forget(self, before: int) -> None:
        """Drop what finished playing before ``before`` (never read again)."""
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) <= before:
            self._chunks.popleft()

    def audible(self, start: int, n: int) -> bool:
        """Whether anything plays in ``[start, start + n)``."""
        return any(s < start + n and s + len(x) > start for s, x in self._chunks)

    def take(self, start: int, n: int) -> np.ndarray:
        """The reference over ``[start, start + n)`` (silence where nothing plays)."""
        out: np.ndarray = np.zeros(n, dtype=np.int16)
        for s, x in self._chunks:
            lo, hi = max(start, s), min(start + n, s + len(x))
            if lo < hi:
                out[lo - start : hi - start] = x[lo - s : hi - s]
        return out


def estimate_delay(near: np.ndarray, far: np.ndarray, max_lag: int) -> tuple[int, float]:
    """GCC-PHAT: ``(delay, peak)``, the lag in samples by which ``near`` follows ``far`` and how sharp it is (0..1).

    ``near``: the microphone over ``[p - w, p)``; ``far``: the reference over ``[p - w - max_lag, p)``."""
    w = len(near)
    if len(far) != w + max_lag:
        raise ValueError(f"far must be {w + max_lag} samples, got {len(far)}")
    nfft = 1 << (2 * w + max_lag - 1).bit_length()
    cross = np.conj(np.fft.rfft(near.astype(np.float64), nfft)) * np.fft.rfft(far.astype(np.float64), nfft)
    cross /= np.abs(cross) + 1e-12
    corr = np.fft.irfft(cross, nfft)[: max_lag + 1]  # corr[m]: near[t] against far[t + m]
    m = int(np.argmax(corr))
    return max_lag - m, float(corr[m])


class EchoCanceller:
    """One session's canceller: ``process`` each 10 ms microphone frame at its position; ``far`` is fed by the
    playout side. Keeps the last ``window_ms`` of microphone for the delay estimate.

    The microphone passes untouched until an echo of the reference has been found in it
    (``processors.echo_presence``): a client with no echo loses nothing, not even the first word of a barge-in
    over the first reply. The filter learns from the start all the same, so it has converged some once it acts."""

    name = "echo"

    def __init__(self, cfg: EchoConfig | None = None):
        self.cfg = cfg or EchoConfig()
        ms = RATE // 1000
        self.tail = self.cfg.tail_ms * ms
        self.max_lag = self.cfg.max_delay_ms * ms
        self.margin = self.cfg.margin_ms * ms
        self.window = self.cfg.window_ms * ms
        self.far = FarEnd()
        self.presence = Presence()  # whether the microphone hears the reference at all
        self.delay: int | None = None  # the echo's delay in samples while one is found (None: none)
        self.shift = 0  # how far behind the microphone the reference is read (the filter's first tap)
        self.resets = 0  # times the filter restarted on a new delay
        self._speex = SpeexEcho(FRAME, self.tail + self.margin, RATE)
        self._mic: deque[np.ndarray] = deque()  # the last window_ms of microphone frames
        self._mic_end = 0  # position after the newest of them
        self._since = 0  # samples since the last estimate
        self._probed = 0  # samples of this reply searched at the fast cadence (probe_for_ms at most)
        self.gain2: float | None = None  # the echo path's power gain while one is found (least squares)
        self._settled_at = 0  # position from which the filter has had settle_ms to learn the path
        self.gated = 0  # frames the gate silenced
        self.touched = 0  # frames it worked on (the rest it handed back as they came)

    @property
    def passing(self) -> bool:
        """Whether it hands frames back as they came for now: no echo sighted."""
        return not acting(self.presence)

    def active(self, pos: int, n: int) -> bool:
        """Whether a frame over ``[pos, pos + n)`` can hold echo: the reference played within the reach."""
        reach = self.max_lag + self.tail + self.margin
        return self.far.audible(pos - reach, n + reach)

    def process(self, frame: np.ndarray, pos: int) -> np.ndarray:
        """int16 ``[FRAME]`` microphone at ``pos`` → the same with the echo of the reference removed."""
        self._remember(frame, pos)
        lost = self.presence.lost_at is not None
        fast = probing(self.presence) and (lost or self._probed < self.cfg.probe_for_ms * RATE // 1000)
        every = (self.cfg.probe_ms if fast else self.cfg.every_ms) * RATE // 1000
        if self._since >= every:
            if fast:
                self._probed += self._since
            self._since = 0
            self._estimate(pos + FRAME, fast)
        out = self._speex.cancel(frame, self.far.take(pos - self.shift, FRAME))
        self.far.forget(pos - self.max_lag - self.window - self.tail)
        if not acting(self.presence):
            return frame.copy()  # no echo seen: the microphone as it came (the filter has learned from it)
        self.touched += 1
        return self._gate(out, pos)

    def _gate(self, out: np.ndarray, pos: int) -> np.ndarray:
        """The non-linear stage: a frame quieter than the echo the reference can make there is echo only.

        The adaptive filter takes seconds of speech to converge (2-10 dB in the first second), and the VAD
        hears a residual 10 dB down as speech. So while the reference plays, a frame whose energy is below
        the loudest echo the played audio could produce at it (the path's measured gain × the reference's
        loudest 10 ms where the echo can be: the filter's window and ``slack_ms`` around it, plus
        ``headroom_db``, ``settle_db`` while the filter is new or the echo lost) is silenced; a barge-in
        louder than the echo passes. It runs only once an echo has been sighted, so its gain is a measured one."""
        assert self.gain2 is not None
        # the filter's window and a slack around it: a client that stalls (a loaded box, a gap in the reply)
        # moves the echo's delay, and the gate must hold while the next estimate catches up
        slack = self.cfg.slack_ms * RATE // 1000
        lo, hi = self.shift + self.tail + self.margin + slack, max(0, self.shift - slack)
        if self.presence.lost_at is not None:  # it moved, to where is not known yet: the whole search range
            lo, hi = self.max_lag + self.tail + self.margin, 0
        ref: np.ndarray = self.far.take(pos - lo, lo - hi + FRAME).astype(np.float32)
        usable = len(ref) // FRAME * FRAME
        loudest = float(np.max(np.mean(ref[len(ref) - usable :].reshape(-1, FRAME) ** 2, axis=1)))
        if loudest <= 0:
            return out
        settled = pos >= self._settled_at and self.presence.lost_at is None
        headroom = self.cfg.headroom_db if settled else self.cfg.settle_db
        echo = self.gain2 * loudest * 10 ** (headroom / 10)
        if float(np.mean(out.astype(np.float32) ** 2)) >= echo:
            return out
        self.gated += 1
        gated: np.ndarray = (out.astype(np.float32) * 10 ** (self.cfg.gate_db / 20)).astype(np.int16)
        return gated

    def _remember(self, frame: np.ndarray, pos: int) -> None:
        if pos != self._mic_end:  # a gap (the cleaner skipped idle audio): the history restarts, a reply begins
            self._mic.clear()
            self._probed = 0
        self._mic.append(frame)
        self._mic_end = pos + len(frame)
        while len(self._mic) * FRAME > self.window:
            self._mic.popleft()
        self._since += len(frame)

    def _estimate(self, end: int, fast: bool) -> None:
        have = len(self._mic) * FRAME
        if fast:
            w = min(have, self.cfg.probe_window_ms * RATE // 1000)
            if w < self.cfg.probe_min_ms * RATE // 1000:
                return
        elif have < self.window:
            return
        else:
            w = self.window
        far = self.far.take(end - w - self.max_lag, w + self.max_lag)
        if not far.any():
            self._probed = 0  # nothing played in the search's reach: the next reply's start is probed again
            return
        near = np.concatenate(self._mic)[-w:]
        delay, peak = estimate_delay(near, far, self.max_lag)
        ref: np.ndarray = far[self.max_lag - delay : self.max_lag - delay + w].astype(np.float64)
        mic = near.astype(np.float64)
        cross, ref2 = float(np.dot(mic, ref)), float(np.dot(ref, ref))
        gain = cross / max(ref2, 1.0)  # least squares: the user's speech, uncorrelated with the reply, leaves it be
        rho = cross / max(float(np.sqrt(float(np.dot(mic, mic)) * ref2)), 1.0)
        playing = float(np.mean(np.abs(far[: len(far) // FRAME * FRAME].reshape(-1, FRAME)).max(axis=1) > 0))
        est = Estimate(delay, peak, gain * gain, rho, playing, w, end)
        was = acting(self.presence)
        self.presence = observe(self.presence, est, self.cfg.presence)
        seen = sighting(est, self.cfg.presence)
        if acting(self.presence) and not was:
            self._settled_at = end + self.cfg.settle_ms * RATE // 1000
        if not acting(self.presence):
            self.delay = self.gain2 = None
        elif seen:  # follow it
            self.delay, self.gain2 = delay, est.gain2
        if not seen:
            return
        # the filter models [shift, shift + tail + margin) (from the first sighting on, so it has learned some
        # once the echo is confirmed): moving it throws away what it learned, so only when the delay leaves
        # the part of it that also holds the reflections after the direct sound
        if not self.shift + self.margin // 2 <= delay <= self.shift + self.tail // 2:
            self.shift = max(0, delay - self.margin)
            self._speex.reset()
            self.resets += 1
            self._settled_at = end + self.cfg.settle_ms * RATE // 1000

    def close(self) -> None:
        self._speex.close()
