"""Audio between aiortc and a session: inbound Opus frames → pcm16 at the session's rate; the paced outbound track."""

from __future__ import annotations

import asyncio
import fractions
import logging
import time
from collections.abc import Callable

import numpy as np
import soxr
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from .pacing import FRAME, RATE, OutboundAudio, PlayoutEvent

log = logging.getLogger("stream_omni.webrtc")

_TIME_BASE = fractions.Fraction(1, RATE)


class PacedTrack(MediaStreamTrack):
    """The call's one outbound audio track: a 20 ms frame of ``source`` per 20 ms of wall clock.

    Until speech output feeds ``source`` it carries silence. ``on_events`` gets the playout
    transitions (``output_audio_buffer.started`` / ``.stopped``) as the frames go out."""

    kind = "audio"

    def __init__(self, source: OutboundAudio, on_events: Callable[[list[PlayoutEvent]], None]):
        super().__init__()
        self.source = source
        self.on_events = on_events
        self._start: float | None = None
        self.late_frames = 0  # frames the loop handed out past their time (an underrun the listener hears)

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        due = self._start + self.source.frames * FRAME / RATE
        if due > now:
            await asyncio.sleep(due - now)
        elif now - due > 0.06:  # three frames behind: the loop was starved
            self.late_frames += 1
        samples, events = self.source.next_frame()
        if events:
            self.on_events(events)
        frame = AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = (self.source.frames - 1) * FRAME
        frame.time_base = _TIME_BASE
        return frame


class InboundAudio:
    """The caller's decoded frames (48 kHz, s16, mono or stereo) → mono pcm16 at the rate the session
    expects, through soxr's streaming resampler (no clicks at frame edges)."""

    def __init__(self) -> None:
        self._rate = 0
        self._stream: soxr.ResampleStream | None = None
        self.frames = 0

    def convert(self, frame: AudioFrame, rate: int) -> bytes:
        pcm = frame.to_ndarray()  # packed s16: [1, samples × channels]
        channels = len(frame.layout.channels)
        mono = pcm.reshape(-1, channels).mean(axis=1, dtype=np.float32) / 32768.0
        self.frames += 1
        if frame.sample_rate == rate:
            out = mono
        else:
            if self._stream is None or rate != self._rate:
                self._stream = soxr.ResampleStream(frame.sample_rate, rate, 1, dtype="float32")
                self._rate = rate
            out = self._stream.resample_chunk(mono)
        return (np.clip(out, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


async def pump_inbound(
    track: MediaStreamTrack, rate: Callable[[], int], sink: Callable[[bytes], None], wanted: Callable[[], bool]
) -> None:
    """Feed ``sink`` the track's audio until the track ends (the peer connection closed). Frames are
    read even when not ``wanted`` (audio input off): aiortc queues them until someone does."""
    inbound = InboundAudio()
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if not isinstance(frame, AudioFrame) or not wanted():
            continue
        pcm = inbound.convert(frame, rate())
        if pcm:
            sink(pcm)
