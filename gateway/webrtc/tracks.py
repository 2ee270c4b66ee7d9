"""Audio between aiortc and a session: inbound Opus frames → pcm16 at the session's rate; the paced outbound track."""

from __future__ import annotations

import asyncio
import fractions
import functools
import logging
import queue
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import soxr
from aiortc import MediaStreamTrack
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame, CodecContext, FFmpegError, Packet
from av.audio.codeccontext import AudioCodecContext

from .track_pacing import FRAME, FRAME_MS, RATE, OutboundAudio, PlayoutEvent

log = logging.getLogger("stream_omni.webrtc")

_TIME_BASE = fractions.Fraction(1, RATE)


SETTLE_FRAMES = 10  # real silence encoded after audio before the cached silence packet takes over (200 ms)
IDLE_FRAMES = 3  # with no response open, silence goes out as one 60 ms packet: a third of the packets
BITRATE = 32_000  # mono voice: a synthesized voice needs no more (aiortc's own encoder sends 96 kbit/s stereo)


def opus_encoder(frames: int = 1) -> AudioCodecContext:
    """libopus through PyAV, mono, ``BITRATE``, one packet per ``frames`` × 20 ms (Opus over RTP may be mono)."""
    codec = CodecContext.create("libopus", "w")
    codec.bit_rate = BITRATE
    codec.format = "s16"
    codec.layout = "mono"
    codec.sample_rate = RATE
    codec.time_base = _TIME_BASE
    codec.options = {"application": "voip", "frame_duration": str(frames * FRAME_MS)}
    return codec


def _frame(samples: np.ndarray, index: int) -> AudioFrame:
    frame = AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = RATE
    frame.pts = index * FRAME
    frame.time_base = _TIME_BASE
    return frame


@functools.cache
def silence_packet(frames: int = 1) -> bytes:
    """One Opus packet of ``frames`` × 20 ms of digital silence, as the encoder settles on it (a few
    bytes), made once."""
    codec = opus_encoder(frames)
    quiet: np.ndarray = np.zeros(FRAME * frames, dtype=np.int16)
    payloads = [bytes(p) for i in range(SETTLE_FRAMES * 2) for p in codec.encode(_frame(quiet, i * frames))]
    return payloads[-1]


class PacedTrack(MediaStreamTrack):
    """The call's one outbound audio track: a 20 ms frame of ``source`` per 20 ms of wall clock.

    It hands aiortc Opus packets, not raw frames: aiortc's own path runs its encoder (96 kbit/s
    stereo, through a resampler) on a thread-pool hop for every frame. Here audio is encoded mono
    on the loop, and silence, once the encoder has settled on it, is a cached packet: 20 ms while a
    response is open (its audio may come any moment), else 60 ms, so an idle call sends a third of
    the packets (aiortc's per-packet path is most of a call's CPU). ``on_events`` gets the playout transitions
    (``output_audio_buffer.started`` / ``.stopped``) as the frames go out; ``open_response`` names
    the response that may still add audio (see ``OutboundAudio.next_frame``)."""

    kind = "audio"

    def __init__(
        self,
        source: OutboundAudio,
        on_events: Callable[[list[PlayoutEvent]], None],
        open_response: Callable[[], str | None] = lambda: None,
    ):
        super().__init__()
        self.source = source
        self.on_events = on_events
        self.open_response = open_response
        self._start: float | None = None
        self._sent = 0  # this track's frames (a resumed call's track plays on from a used queue)
        self._quiet = SETTLE_FRAMES  # silent frames in a row: a new track starts settled
        self._codec = opus_encoder()
        self._pending: list[bytes] = []
        self.idle_frames = IDLE_FRAMES  # 20 ms frames per silent packet while no response is open
        self.late_frames = 0  # frames the loop handed out past their time (an underrun the listener hears)
        self.encoded = 0  # frames that went through the encoder (the rest were cached silence)

    async def recv(self) -> Packet:  # type: ignore[type-arg]  # aiortc's signature: a bare Packet
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        due = self._start + self._sent * FRAME / RATE
        if due > now:
            await asyncio.sleep(due - now)
        elif now - due > 0.06:  # three frames behind: the loop was starved
            self.late_frames += 1
        silent = self.source.silent
        open_response = self.open_response()
        samples, events = self.source.next_frame(open_response)
        if events:
            self.on_events(events)
        self._quiet = self._quiet + 1 if silent else 0
        frames = 1
        if self._quiet > SETTLE_FRAMES:
            if open_response is None and self.source.silent:  # no audio can come before the next response
                frames = self.idle_frames
            payload = silence_packet(frames)
        else:
            self._pending.extend(bytes(p) for p in self._codec.encode(_frame(samples, self._sent)))
            self.encoded += 1
            payload = self._pending.pop(0) if self._pending else silence_packet()
        packet = Packet(payload)
        packet.pts = self._sent * FRAME
        packet.time_base = _TIME_BASE
        self._sent += frames
        return packet


class ListeningBuffer(JitterBuffer):
    """A jitter buffer for a listener, not a player: each Opus packet (one 20 ms frame) goes to the
    decoder as it arrives. A packet that arrives after a later one is dropped and a lost one is
    skipped, never waited for. The server only feeds VAD and Whisper, for which 20 ms missing now and
    then is nothing and every ms of holding is turn latency (aiortc's buffer, made for playout, holds
    4 frames, and after a loss keeps a backlog of up to 16)."""

    def _remove_frame(self, sequence_number: int) -> JitterFrame | None:
        for count in range(self.capacity):
            packet = self._packets[(self._origin + count) % self.capacity]  # type: ignore[operator]
            if packet is not None:
                self.remove(count + 1)
                return JitterFrame(data=packet._data, timestamp=packet.timestamp)  # type: ignore[attr-defined]
        return None


def shorten_jitter_buffer(receiver: object, prefetch: int) -> None:
    """The caller's audio waits ``prefetch`` frames in the jitter buffer (0: none, ``ListeningBuffer``),
    not aiortc's 4 (80 ms). Pinned to aiortc 1.16's receiver (a private attribute); on another version
    its default stays."""
    name = "_RTCRtpReceiver__jitter_buffer"
    current = getattr(receiver, name, None)
    if not isinstance(current, JitterBuffer):
        log.warning("aiortc's receiver has no jitter buffer where expected: its default stays")
    elif prefetch == 0:
        setattr(receiver, name, ListeningBuffer(capacity=current.capacity))
    else:
        setattr(receiver, name, JitterBuffer(capacity=current.capacity, prefetch=prefetch))


class InlineDecoder:
    """Stands in for aiortc's decoder queue: each Opus frame is decoded on the loop as it leaves the
    jitter buffer and goes straight onto the track's queue. aiortc's own path hands every 20 ms frame
    to a decoder thread and back through ``run_coroutine_threadsafe`` (a task, a future and a loop
    wake-up per frame), which costs more than decoding 20 ms of Opus (about 30 µs). The thread
    aiortc still starts waits on ``get`` until the receiver stops, then ends the track as before."""

    def __init__(self, output: asyncio.Queue[Any]):
        self._output = output
        self._codec = CodecContext.create("libopus", "r")
        self._codec.format = "s16"
        self._codec.layout = "mono"  # the session listens in mono: libopus folds a stereo caller down
        self._codec.sample_rate = RATE
        self._stop: queue.Queue[None] = queue.Queue()
        self.failed = 0

    def put(self, task: tuple[Any, JitterFrame] | None) -> None:
        if task is None:
            self._stop.put(None)
            return
        encoded = task[1]
        packet = Packet(encoded.data)
        packet.pts = encoded.timestamp
        packet.time_base = _TIME_BASE
        try:
            frames = self._codec.decode(packet)
        except FFmpegError:
            self.failed += 1  # one bad packet is 20 ms missing; the decoder keeps its state
            return
        for frame in frames:
            self._output.put_nowait(frame)

    def get(self) -> None:
        return self._stop.get()


def decode_inline(receiver: object) -> None:
    """Decode the caller's audio with ``InlineDecoder`` instead of aiortc's per-frame thread hop.
    Pinned to aiortc 1.16's receiver (private attributes), called before the receiver starts; on
    another version aiortc's own decoder stays."""
    name = "_RTCRtpReceiver__decoder_queue"
    track = getattr(receiver, "_track", None)
    if not isinstance(getattr(receiver, name, None), queue.Queue) or not isinstance(
        getattr(track, "_queue", None), asyncio.Queue
    ):
        log.warning("aiortc's receiver has no decoder queue where expected: its own decoder stays")
        return
    setattr(receiver, name, InlineDecoder(track._queue))  # type: ignore[union-attr]


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
        s16: bytes = (np.clip(out, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        return s16


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
