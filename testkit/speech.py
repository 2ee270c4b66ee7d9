"""Real speech for the audio tests, synthesized with espeak-ng (Debian: ``apt-get install espeak-ng``).

``speak`` returns float32 mono at the rate asked for, with espeak's leading and trailing
silence trimmed so that a test knows where the speech is. Tests that need it are marked
``requires_espeak`` (tests/conftest.py) and skip, naming the missing package, only where
espeak-ng is absent.
"""

from __future__ import annotations

import functools
import io
import shutil
import subprocess

import numpy as np
import soundfile as sf
import soxr

ESPEAK = shutil.which("espeak-ng")


@functools.lru_cache(maxsize=32)
def _espeak(text: str, voice: str, wpm: int) -> tuple[bytes, int]:
    assert ESPEAK is not None
    wav = subprocess.run(
        [ESPEAK, "-v", voice, "-s", str(wpm), "--stdout", text], check=True, capture_output=True, timeout=60
    ).stdout
    audio, rate = sf.read(io.BytesIO(wav), dtype="float32")
    return audio.tobytes(), rate


def speak(
    text: str, rate: int = 16_000, voice: str = "en-us", wpm: int = 150, trim: bool = True
) -> np.ndarray:
    """``text`` spoken by espeak-ng → float32 ``[n]`` at ``rate`` (silence at both ends trimmed)."""
    raw, native = _espeak(text, voice, wpm)
    audio = np.frombuffer(raw, dtype=np.float32)
    if trim:
        start, end = speech_bounds(audio)
        audio = audio[start:end]
    return soxr.resample(audio, native, rate).astype(np.float32) if rate != native else audio.copy()


def speech_bounds(audio: np.ndarray, level: float = 0.02) -> tuple[int, int]:
    """First and one-past-last sample whose magnitude exceeds ``level``."""
    loud = np.flatnonzero(np.abs(audio) > level)
    if loud.size == 0:
        raise ValueError("no speech in audio")
    return int(loud[0]), int(loud[-1]) + 1


def silence(seconds: float, rate: int = 16_000) -> np.ndarray:
    return np.zeros(round(seconds * rate), dtype=np.float32)


def wav_bytes(audio: np.ndarray, rate: int, subtype: str = "PCM_16") -> bytes:
    """float32 ``[n]`` (or ``[n, channels]``) → the bytes of a WAV file."""
    out = io.BytesIO()
    sf.write(out, audio, rate, format="WAV", subtype=subtype)
    return out.getvalue()
