"""Wire audio formats of the Realtime API (audio/pcm, audio/pcmu, audio/pcma) both ways. Pure.

Output: float32 speech at the voice's rate → the session's ``audio.output.format`` bytes
(pcm16 24 kHz, or G.711 at 8 kHz), resampled with soxr. Input: G.711 bytes → pcm16 at 8 kHz,
which the input buffer then resamples like any pcm16.

Each output chunk is resampled on its own: a synthesized clause starts and ends in the voice's
own silence, so there is no click at a boundary, and a chunk's bytes are exactly its audio (a
streaming resampler would hold part of chunk n back until chunk n+1 arrives).
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from .audio import float32_to_pcm16, resample
from .g711 import G711_RATE, alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

WireFormat = Literal["audio/pcm", "audio/pcmu", "audio/pcma"]
WIRE_FORMATS: tuple[str, ...] = get_args(WireFormat)
PCM_RATE = 24_000  # audio/pcm on the Realtime wire is 24 kHz mono little-endian int16


def wire_rate(fmt: str) -> int:
    """Samples per second of ``fmt`` on the wire."""
    return PCM_RATE if fmt == "audio/pcm" else G711_RATE


def bytes_per_sample(fmt: str) -> int:
    return 2 if fmt == "audio/pcm" else 1


def bytes_to_ms(fmt: str, n_bytes: int) -> float:
    """How long ``n_bytes`` of ``fmt`` play."""
    return n_bytes / bytes_per_sample(fmt) * 1000.0 / wire_rate(fmt)


def ms_to_bytes(fmt: str, ms: float) -> int:
    """The byte offset in a ``fmt`` stream at ``ms`` (whole samples)."""
    return int(ms * wire_rate(fmt) / 1000.0) * bytes_per_sample(fmt)


def encode(audio: np.ndarray, rate: int, fmt: str) -> bytes:
    """float32 ``[n]`` at ``rate`` → ``fmt`` bytes at that format's wire rate."""
    out = resample(audio, rate, wire_rate(fmt))  # [m]
    if fmt == "audio/pcm":
        return float32_to_pcm16(out)
    pcm = np.frombuffer(float32_to_pcm16(out), dtype="<i2")
    return ulaw_encode(pcm) if fmt == "audio/pcmu" else alaw_encode(pcm)


def g711_to_pcm16(data: bytes, fmt: str) -> bytes:
    """audio/pcmu or audio/pcma bytes → pcm16 little-endian bytes at 8 kHz (one sample per byte in)."""
    pcm = ulaw_decode(data) if fmt == "audio/pcmu" else alaw_decode(data)
    return pcm.astype("<i2").tobytes()
