"""The outbound audio queue of a call: 48 kHz pcm16 in, one 20 ms frame out per tick, with its playout position (pure).

The shell (``gateway.webrtc.tracks.PacedTrack``) calls ``next_frame`` once per 20 ms of wall
clock and hands the frame to the Opus encoder, so whatever is queued plays in real time and the
position here is what the listener has heard (less the network and the client's jitter buffer).
When nothing is queued the frame is silence: the track never stalls. The transitions a client
sees as ``output_audio_buffer.started`` / ``.stopped`` / ``.cleared`` come back as values.

A response's audio arrives chunk by chunk (one synthesized clause at a time). Running dry between
two chunks is an underrun, not the end: ``stopped`` waits until the queue is empty *and* the
response can add no more audio (GA: no more audio is forthcoming, after ``response.done``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from processors.audio import resample
from processors.audio_formats import g711_to_pcm16, wire_rate

RATE = 48_000  # Opus' clock: frames go to the encoder at this rate, no resampling there
FRAME = RATE // 50  # 20 ms, Opus' usual packet
FRAME_MS = 20


@dataclass(frozen=True)
class TrackStarted:
    """Audio of ``response_id`` began to play."""

    response_id: str


@dataclass(frozen=True)
class TrackStopped:
    """Everything of ``response_id`` has played and no more is coming: its audio is over."""

    response_id: str


@dataclass(frozen=True)
class Cleared:
    """The queue was cut (``output_audio_buffer.clear`` or barge-in); ``response_id``: what was playing."""

    response_id: str | None
    item_id: str | None
    played_ms: int  # of that item, when it was cut (the truncation point)
    items: tuple[tuple[str, int], ...] = ()  # every item cut, playing or still queued: (item id, ms of it played)


PlayoutEvent = TrackStarted | TrackStopped | Cleared


def track_samples(audio: bytes, fmt: str) -> np.ndarray:
    """A synthesized chunk in the session's wire format (``audio/pcm`` 24 kHz, G.711 8 kHz) → int16 at ``RATE``."""
    pcm = g711_to_pcm16(audio, fmt) if fmt in ("audio/pcmu", "audio/pcma") else audio
    floats = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0
    out = resample(floats, wire_rate(fmt), RATE)
    samples: np.ndarray = (np.clip(out, -1.0, 1.0) * 32767.0).astype(np.int16)
    return samples


@dataclass
class _TrackChunk:
    samples: np.ndarray  # int16 [n] at RATE
    response_id: str
    item_id: str


class OutboundAudio:
    def __init__(self, max_queued_s: float = 120.0):
        self.max_queued = int(max_queued_s * RATE)  # a reply longer than this is cut (bounded memory)
        self._queue: deque[_TrackChunk] = deque()
        self._offset = 0  # samples of the head chunk already played
        self._queued = 0
        self._playing: tuple[str, str] | None = None  # (response_id, item_id) being heard
        self._played: dict[str, int] = {}  # item id → samples of it played
        self.last_response: str | None = None  # the latest response whose audio started
        self.frames = 0  # frames handed out, silence included
        self.underruns = 0  # silent frames in the middle of a response (synthesis fell behind real time)

    @property
    def playing(self) -> bool:
        return self._playing is not None

    @property
    def silent(self) -> bool:
        """Nothing is queued: the next frame is all silence."""
        return not self._queue

    @property
    def queued_ms(self) -> int:
        return (self._queued - self._offset) * 1000 // RATE

    def played_ms(self, item_id: str) -> int:
        """How much of ``item_id``'s audio has gone out: where a truncation cuts it."""
        return self._played.get(item_id, 0) * 1000 // RATE

    def push(self, samples: np.ndarray, response_id: str, item_id: str) -> bool:
        """Queue int16 audio at 48 kHz; False (nothing queued) when the queue is full."""
        if samples.dtype != np.int16 or samples.ndim != 1:
            raise ValueError(f"expected int16 [n] at {RATE} Hz, got {samples.dtype} {samples.shape}")
        if self._queued - self._offset + len(samples) > self.max_queued:
            return False
        if len(samples):
            self._queue.append(_TrackChunk(samples, response_id, item_id))
            self._queued += len(samples)
        return True

    def next_frame(self, open_response: str | None = None) -> tuple[np.ndarray, list[PlayoutEvent]]:
        """The next 20 ms (queued audio, padded with silence) and what started or stopped with it.

        ``open_response``: the response that may still add audio (the session's active one); while
        the playing response is that one, running dry is an underrun and nothing stops."""
        out: np.ndarray = np.zeros(FRAME, dtype=np.int16)
        events: list[PlayoutEvent] = []
        filled = 0
        while filled < FRAME and self._queue:
            head = self._queue[0]
            if self._playing is None or self._playing[0] != head.response_id:
                if self._playing is not None:
                    events.append(TrackStopped(self._playing[0]))
                events.append(TrackStarted(head.response_id))
                self.last_response = head.response_id
            self._playing = (head.response_id, head.item_id)
            take = min(FRAME - filled, len(head.samples) - self._offset)
            out[filled : filled + take] = head.samples[self._offset : self._offset + take]
            self._played[head.item_id] = self._played.get(head.item_id, 0) + take
            filled += take
            self._offset += take
            if self._offset == len(head.samples):
                self._queue.popleft()
                self._queued -= len(head.samples)
                self._offset = 0
        if not self._queue and self._playing is not None:
            if self._playing[0] != open_response:
                events.append(TrackStopped(self._playing[0]))
                self._playing = None
            elif filled < FRAME:
                self.underruns += 1
        self.frames += 1
        return out, events

    def clear(self) -> Cleared:
        """Drop everything queued; what was playing, how much of it was heard, and every item cut."""
        cut: dict[str, int] = {}
        if self._playing is not None:
            cut[self._playing[1]] = self.played_ms(self._playing[1])
        for chunk in self._queue:
            cut.setdefault(chunk.item_id, self.played_ms(chunk.item_id))
        playing = self._playing or ((self._queue[0].response_id, self._queue[0].item_id) if self._queue else None)
        self._queue.clear()
        self._queued = self._offset = 0
        self._playing = None
        if playing is None:
            return Cleared(None, None, 0)
        return Cleared(playing[0], playing[1], self.played_ms(playing[1]), tuple(cut.items()))
