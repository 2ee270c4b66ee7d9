"""A recording's speech segments: the server VAD (``processors.vad.ServerVad``) run over a whole file.

What a Realtime session's server VAD does to streamed audio, done to an uploaded file at once: each
turn it would cut is a segment, its audio what that turn's transcription pass would read. Segments
longer than Whisper's 30 s window are split into equal parts (each pass stays one window long, so
one upload never holds the shared Whisper worker for more than a pass at a time). Blocking (the
VAD model runs per 32 ms window): call it on a worker thread.

No noise gate: a file is transcribed whole, not listened to in a room; the gate's floor would
take the speech itself for background in a recording that starts mid-sentence.

Shapes: audio is float32 ``[n]`` at 16 kHz (``processors.audio``), as each segment's audio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .audio import TARGET_RATE
from .vad import WINDOW_MS, ServerVad, ServerVadConfig, SpeechProbModel, SpeechStopped

MAX_SEGMENT_S = 30.0  # Whisper's window: longer turns are split


@dataclass(frozen=True)
class Segment:
    """One stretch of speech: where it lies in the file (ms) and its audio (float32 ``[n]`` at 16 kHz)."""

    start_ms: int
    end_ms: int
    audio: np.ndarray = field(repr=False)


def speech_segments(
    audio: np.ndarray,
    config: ServerVadConfig | None = None,
    model: SpeechProbModel | None = None,
    max_s: float = MAX_SEGMENT_S,
) -> list[Segment]:
    """The speech of ``audio`` in order, as the server VAD with ``config`` cuts it (``[]``: none heard).

    ``end_ms`` is where the speech ends (the VAD's ``audio_end_ms`` less the silence that closed the
    turn), never past the file's end; the audio keeps that silence, as a voice turn's does."""
    cfg = config or ServerVadConfig()
    vad = ServerVad(cfg, model=model, noise_gate_db=None)
    duration_ms = audio.size * 1000 // TARGET_RATE
    # silence after the end closes a turn still open there (the VAD ends turns on silence only)
    tail: np.ndarray = np.zeros((cfg.silence_duration_ms + 2 * WINDOW_MS) * TARGET_RATE // 1000, dtype=np.float32)
    out: list[Segment] = []
    for ev in vad.feed(np.concatenate([np.asarray(audio, dtype=np.float32), tail])):
        if not isinstance(ev, SpeechStopped) or ev.audio is None:
            continue
        start = min(ev.audio_start_ms, duration_ms)
        end = min(max(start, ev.audio_end_ms - cfg.silence_duration_ms), duration_ms)
        if end > start:
            out.extend(_split(start, end, ev.audio, max_s))
    return out


def _split(start_ms: int, end_ms: int, audio: np.ndarray, max_s: float) -> list[Segment]:
    """A turn as parts of at most ``max_s`` seconds of audio each, equal in length."""
    parts = max(1, math.ceil(audio.size / (max_s * TARGET_RATE)))
    if parts == 1:
        return [Segment(start_ms, end_ms, audio)]
    size = math.ceil(audio.size / parts)
    out = []
    for i in range(parts):
        lo = i * size
        chunk = audio[lo : lo + size]
        s = start_ms + lo * 1000 // TARGET_RATE
        e = min(end_ms, s + chunk.size * 1000 // TARGET_RATE)
        if e > s:
            out.append(Segment(s, e, chunk))
    return out
