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


def speak(text: str, rate: int = 16_000, voice: str = "en-us", wpm: int = 150, trim: bool = True) -> np.ndarray:
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


BABBLE_TEXTS = (
    "The weather report says rain tomorrow afternoon.",
    "I think the meeting was moved to Thursday.",
    "Could you pass me the salt and pepper please.",
    "Our train leaves from platform nine at noon.",
    "She bought three apples and a loaf of bread.",
    "The children played football in the park all day.",
    "We should paint the fence before the summer.",
    "My brother works at the hospital downtown.",
)
BABBLE_VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb+m3", "en-us+m5", "en-gb+f2", "en-us+f4", "en-us+m2")


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))


def babble(seconds: float, talkers: int = 8, seed: int = 0, rate: int = 16_000) -> np.ndarray:
    """Crowd noise: ``talkers`` espeak-ng voices, each looping its own sentence from a random offset,
    summed at equal level → float32 ``[seconds * rate]`` with unit RMS. Eight talkers is the usual
    babble (NOISEX-style); fewer is just people talking, which no VAD should ignore."""
    rng = np.random.default_rng(seed)
    out = np.zeros(round(seconds * rate), dtype=np.float64)
    for k in range(talkers):
        voice = speak(BABBLE_TEXTS[k % len(BABBLE_TEXTS)], rate, BABBLE_VOICES[k % len(BABBLE_VOICES)])
        voice = voice / rms(voice)
        offset = int(rng.integers(0, voice.size))
        loops = np.tile(voice, (out.size + offset) // voice.size + 2)
        out += loops[offset : offset + out.size]
    return (out / rms(out)).astype(np.float32)


def white_noise(seconds: float, seed: int = 0, rate: int = 16_000) -> np.ndarray:
    """Gaussian white noise, unit RMS."""
    noise = np.random.default_rng(seed).standard_normal(round(seconds * rate))
    return (noise / rms(noise)).astype(np.float32)


def at_snr(noise: np.ndarray, speech: np.ndarray, snr_db: float) -> np.ndarray:
    """``noise`` scaled so that ``speech`` (its RMS over the speech itself) is ``snr_db`` above it."""
    return (noise * (rms(speech) / rms(noise) / 10 ** (snr_db / 20))).astype(np.float32)
