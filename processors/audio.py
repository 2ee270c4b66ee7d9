"""Input audio: bytes on the wire → float32 mono samples at 16 kHz, the rate every model here wants.

Pure (no I/O, no asyncio, no torch). Three ways audio arrives (PROTOCOL.md):

- base64 pcm16 in ``input_audio_buffer.append`` / ``input_audio`` content parts (``decode_base64_pcm16``);
- raw pcm16 little-endian in a binary WebSocket frame (``decode_pcm16``);
- a WAV file in the Chat Completions ``input_audio {data, format:"wav"}`` part (``decode_wav``).

pcm16 arrives at a declared rate (24 kHz by default, 16 kHz allowed; ``AudioLimits.rates``) and
is resampled with soxr. Every rejection is one ``AudioError`` carrying a machine ``code`` (for
the wire ``error`` event) and a human message.

``AudioBuffer`` is the per-session ``input_audio_buffer``: it accumulates appended frames up to
``AudioLimits.max_buffer_s``, resamples them as one stream (no clicks at frame boundaries), and
keeps the session's millisecond clock (``audio_start_ms``/``audio_end_ms`` count from the first
sample ever appended, across commits and clears, as in the OpenAI Realtime API).

Shapes: every array this module returns is float32 ``[n_samples]`` at ``TARGET_RATE`` in [-1, 1].
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass, field

import numpy as np
import soxr

from .errors import InputError

TARGET_RATE = 16_000  # what silero-vad and whisper consume


class AudioError(InputError):
    """Bad input audio. ``code`` is stable and goes into the wire ``error.code``."""


@dataclass(frozen=True)
class AudioLimits:
    """What input audio is accepted. One comment per field."""

    rates: frozenset[int] = frozenset({8_000, 16_000, 24_000})  # pcm16 rates (audio.input.format; 8 kHz = G.711)
    max_buffer_s: float = 600.0  # most audio one buffer (one user turn) may hold: 10 minutes
    max_frame_bytes: int = 16 * 1024 * 1024  # largest single encoded frame (base64 text or raw bytes)
    wav_rate_range: tuple[int, int] = (8_000, 192_000)  # WAV files carry their own rate; accept these


DEFAULT_LIMITS = AudioLimits()


# ---------------------------------------------------------------- conversions


def pcm16_to_float32(raw: bytes) -> np.ndarray:
    """Little-endian int16 bytes → float32 ``[len(raw) // 2]`` in [-1, 1). ``len(raw)`` must be even."""
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


def float32_to_pcm16(audio: np.ndarray) -> bytes:
    """float32 ``[n]`` in [-1, 1] → little-endian int16 bytes (clipped, rounded)."""
    clipped = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 32767.0 / 32768.0)
    return np.round(clipped * 32768.0).astype("<i2").tobytes()


def resample(audio: np.ndarray, from_rate: int, to_rate: int = TARGET_RATE) -> np.ndarray:
    """One-shot soxr resampling of float32 ``[n]`` → float32 ``[≈ n * to_rate / from_rate]``."""
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    if from_rate == to_rate or audio.size == 0:
        return audio
    return soxr.resample(audio, from_rate, to_rate, quality="HQ").astype(np.float32, copy=False)


# ---------------------------------------------------------------- validation


def check_rate(rate: int, limits: AudioLimits = DEFAULT_LIMITS) -> int:
    """Return ``rate`` if it is an accepted pcm16 rate, else raise ``unsupported_rate``."""
    if isinstance(rate, bool) or not isinstance(rate, int) or rate not in limits.rates:
        allowed = ", ".join(str(r) for r in sorted(limits.rates))
        raise AudioError("unsupported_rate", f"audio rate {rate!r} Hz is not supported (allowed: {allowed})")
    return rate


def _check_frame_size(n_bytes: int, limits: AudioLimits) -> None:
    if n_bytes > limits.max_frame_bytes:
        raise AudioError(
            "frame_too_large",
            f"audio frame of {n_bytes} bytes exceeds the limit of {limits.max_frame_bytes} bytes",
        )


def _check_pcm_bytes(raw: bytes) -> None:
    if len(raw) == 0:
        raise AudioError("empty_audio", "audio is empty")
    if len(raw) % 2:
        raise AudioError("invalid_audio", f"pcm16 audio must have an even byte count, got {len(raw)} bytes")


def _check_duration(n_samples: int, rate: int, limits: AudioLimits, already_s: float = 0.0) -> None:
    seconds = already_s + n_samples / rate
    if seconds > limits.max_buffer_s:
        raise AudioError(
            "buffer_too_long",
            f"input audio would be {seconds:.1f} s long; the limit is {limits.max_buffer_s:g} s",
        )


def b64decode_strict(data: str) -> bytes:
    """Strict base64 (RFC 4648 alphabet, padding required, no whitespace) → bytes."""
    if not isinstance(data, str):
        raise AudioError("invalid_base64", f"audio must be a base64 string, got {type(data).__name__}")
    try:
        return base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise AudioError("invalid_base64", f"audio is not valid base64: {exc}") from None


# ---------------------------------------------------------------- one-shot decoders


def decode_pcm16(raw: bytes, rate: int = 24_000, limits: AudioLimits = DEFAULT_LIMITS) -> np.ndarray:
    """Raw pcm16 little-endian mono at ``rate`` → float32 ``[n]`` at 16 kHz."""
    check_rate(rate, limits)
    _check_frame_size(len(raw), limits)
    _check_pcm_bytes(raw)
    _check_duration(len(raw) // 2, rate, limits)
    return resample(pcm16_to_float32(raw), rate)


def decode_base64_pcm16(data: str, rate: int = 24_000, limits: AudioLimits = DEFAULT_LIMITS) -> np.ndarray:
    """base64 pcm16 little-endian mono at ``rate`` → float32 ``[n]`` at 16 kHz."""
    _check_frame_size(len(data) if isinstance(data, str) else 0, limits)
    return decode_pcm16(b64decode_strict(data), rate, limits)


def decode_wav(data: bytes, limits: AudioLimits = DEFAULT_LIMITS) -> np.ndarray:
    """A WAV file's bytes (any channel count, any PCM/float subtype) → float32 mono ``[n]`` at 16 kHz.

    Channels are averaged. The file's own rate must lie in ``limits.wav_rate_range``.
    """
    import soundfile as sf  # libsndfile; imported lazily so the pcm path does not need it

    _check_frame_size(len(data), limits)
    if len(data) == 0:
        raise AudioError("empty_audio", "audio is empty")
    try:
        info = sf.info(io.BytesIO(data))
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        # libsndfile's message names the Python object it read from (an address): never echo it
        raise AudioError("invalid_audio", "not a readable WAV file") from exc
    if info.format != "WAV" and info.format != "WAVEX":
        raise AudioError("invalid_audio", f"expected a WAV file, got {info.format}")
    lo, hi = limits.wav_rate_range
    if not lo <= info.samplerate <= hi:
        raise AudioError("unsupported_rate", f"WAV rate {info.samplerate} Hz is outside {lo}..{hi} Hz")
    _check_duration(info.frames, info.samplerate, limits)
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise AudioError("invalid_audio", "WAV file could not be decoded") from exc
    if samples.shape[0] == 0:
        raise AudioError("empty_audio", "WAV file holds no samples")
    if not np.isfinite(samples).all():
        raise AudioError("invalid_audio", "WAV file holds NaN or infinite samples")
    mono = samples.mean(axis=1, dtype=np.float32)
    return resample(np.clip(mono, -1.0, 1.0), rate)


# ---------------------------------------------------------------- the session's input buffer


@dataclass
class AudioBuffer:
    """``input_audio_buffer``: appended pcm16 frames → one float32 16 kHz turn.

    ``append`` returns the newly resampled samples (feed them to the VAD); ``commit`` returns
    the whole buffered turn and empties the buffer; ``clear`` drops it. Milliseconds are on the
    session clock: ``start_ms`` is where the buffered turn begins, ``end_ms`` where it ends.
    """

    rate: int = 24_000  # declared input rate of appended pcm16
    limits: AudioLimits = field(default_factory=AudioLimits)
    _chunks: list[np.ndarray] = field(default_factory=list, init=False, repr=False)
    _buffered_in: int = field(default=0, init=False)  # input-rate samples in the current turn
    _start_ms: float = field(default=0.0, init=False)  # session clock at the current turn's start
    _stream: soxr.ResampleStream | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_rate(self.rate, self.limits)

    @property
    def duration_ms(self) -> float:
        """Length of the buffered (uncommitted) audio."""
        return self._buffered_in * 1000.0 / self.rate

    @property
    def start_ms(self) -> int:
        """Session-clock ms at which the buffered turn begins."""
        return round(self._start_ms)

    @property
    def end_ms(self) -> int:
        """Session-clock ms of the last appended sample (the whole session's audio length)."""
        return round(self._start_ms + self.duration_ms)

    @property
    def empty(self) -> bool:
        return self._buffered_in == 0

    def set_rate(self, rate: int) -> None:
        """Change the declared input rate (``session.update``). Only while the buffer is empty."""
        check_rate(rate, self.limits)
        if rate != self.rate and not self.empty:
            raise RuntimeError(f"cannot change the audio rate with {self.duration_ms:.0f} ms buffered")
        self.rate = rate
        self._stream = None

    def append(self, raw: bytes) -> np.ndarray:
        """Append one raw pcm16 frame; return its samples as float32 ``[m]`` at 16 kHz.

        A rejected frame (odd bytes, empty, too large, buffer over ``max_buffer_s``) leaves the
        buffer unchanged. The returned samples lag the input by the resampler's small delay;
        ``commit`` flushes that tail.
        """
        _check_frame_size(len(raw), self.limits)
        _check_pcm_bytes(raw)
        n_in = len(raw) // 2
        _check_duration(n_in, self.rate, self.limits, already_s=self._buffered_in / self.rate)
        samples = pcm16_to_float32(raw)
        if self.rate != TARGET_RATE:
            if self._stream is None:
                self._stream = soxr.ResampleStream(self.rate, TARGET_RATE, 1, dtype="float32", quality="HQ")
            samples = self._stream.resample_chunk(samples)
        self._chunks.append(samples)
        self._buffered_in += n_in
        return samples

    def append_base64(self, data: str) -> np.ndarray:
        """``input_audio_buffer.append``: strict base64 pcm16 → as ``append``."""
        _check_frame_size(len(data) if isinstance(data, str) else 0, self.limits)
        return self.append(b64decode_strict(data))

    def commit(self) -> np.ndarray:
        """End the turn: return all buffered audio as float32 ``[n]`` at 16 kHz and empty the buffer.

        Raises ``AudioError("input_audio_buffer_commit_empty")`` when nothing is buffered.
        """
        if self.empty:
            raise AudioError("input_audio_buffer_commit_empty", "the input audio buffer is empty")
        if self._stream is not None:
            self._chunks.append(self._stream.resample_chunk(np.zeros(0, np.float32), last=True))
        audio = np.concatenate(self._chunks).astype(np.float32, copy=False)
        self._advance()
        return audio

    def clear(self) -> None:
        """Drop the buffered audio (``input_audio_buffer.clear``); the session clock keeps running."""
        self._advance()

    def _advance(self) -> None:
        self._start_ms += self.duration_ms
        self._buffered_in = 0
        self._chunks = []
        self._stream = None
