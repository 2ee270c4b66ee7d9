"""processors.audio: pcm16 / base64 / WAV decoding, validation errors, and the session input buffer."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from processors.audio import (
    AudioBuffer,
    AudioError,
    AudioLimits,
    decode_base64_pcm16,
    decode_pcm16,
    decode_wav,
    float32_to_pcm16,
    pcm16_to_float32,
)
from testkit.espeak import wav_bytes


def tone(freq: float, seconds: float, rate: int, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_freq(audio: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))
    return float(np.fft.rfftfreq(audio.size, 1 / rate)[spectrum.argmax()])


def code_of(exc_info: pytest.ExceptionInfo[AudioError]) -> str:
    return exc_info.value.code


# ---------------------------------------------------------------- conversions


def test_pcm16_round_trip_is_exact_for_int16_values():
    ints = np.array([-32768, -1, 0, 1, 12345, 32767], dtype="<i2")
    assert float32_to_pcm16(pcm16_to_float32(ints.tobytes())) == ints.tobytes()


def test_pcm16_is_little_endian():
    assert pcm16_to_float32(b"\x00\x40")[0] == pytest.approx(0.5)  # 0x4000 = 16384


def test_24k_pcm_is_resampled_to_16k_keeping_pitch_and_length():
    audio = tone(440, 1.0, 24_000)
    out = decode_pcm16(float32_to_pcm16(audio), rate=24_000)
    assert out.dtype == np.float32
    assert out.size == 16_000
    assert dominant_freq(out, 16_000) == pytest.approx(440, abs=2)


def test_16k_pcm_is_passed_through_unresampled():
    audio = tone(300, 0.5, 16_000)
    out = decode_pcm16(float32_to_pcm16(audio), rate=16_000)
    np.testing.assert_allclose(out, audio, atol=1 / 32768)


def test_base64_pcm_decodes_like_raw_pcm():
    raw = float32_to_pcm16(tone(500, 0.2, 24_000))
    np.testing.assert_array_equal(decode_base64_pcm16(base64.b64encode(raw).decode()), decode_pcm16(raw))


# ---------------------------------------------------------------- pcm validation


def test_odd_byte_count_is_rejected():
    with pytest.raises(AudioError) as exc:
        decode_pcm16(b"\x00\x01\x02", rate=24_000)
    assert code_of(exc) == "invalid_audio"
    assert "even" in exc.value.message


def test_empty_pcm_is_rejected():
    with pytest.raises(AudioError) as exc:
        decode_pcm16(b"", rate=24_000)
    assert code_of(exc) == "empty_audio"


@pytest.mark.parametrize("bad", ["AAA", "AA==AA==", "AAAA\n", "AA!A", "ÄÄÄÄ"])
def test_malformed_base64_is_rejected(bad: str):
    with pytest.raises(AudioError) as exc:
        decode_base64_pcm16(bad)
    assert code_of(exc) == "invalid_base64"


@pytest.mark.parametrize("rate", [22_050, 44_100, 48_000, 0, -16_000, True])
def test_unsupported_pcm_rate_is_rejected(rate: int):
    with pytest.raises(AudioError) as exc:
        decode_pcm16(b"\x00\x00" * 10, rate=rate)
    assert code_of(exc) == "unsupported_rate"


def test_8khz_is_accepted_as_g711_decodes_to_it():
    # audio/pcmu and audio/pcma arrive at 8 kHz and are decoded to pcm16 there, then resampled like the rest
    assert decode_pcm16(b"\x00\x00" * 80, rate=8_000).size == 160


def test_allowed_rates_are_configurable():
    limits = AudioLimits(rates=frozenset({48_000}))
    assert decode_pcm16(b"\x00\x00" * 480, rate=48_000, limits=limits).size == 160
    with pytest.raises(AudioError):
        decode_pcm16(b"\x00\x00" * 480, rate=24_000, limits=limits)


def test_over_long_pcm_is_rejected():
    limits = AudioLimits(max_buffer_s=1.0)
    decode_pcm16(b"\x00\x00" * 16_000, rate=16_000, limits=limits)  # exactly 1 s is allowed
    with pytest.raises(AudioError) as exc:
        decode_pcm16(b"\x00\x00" * 16_001, rate=16_000, limits=limits)
    assert code_of(exc) == "buffer_too_long"


def test_oversize_frame_is_rejected_before_decoding():
    limits = AudioLimits(max_frame_bytes=100)
    with pytest.raises(AudioError) as exc:
        decode_base64_pcm16("A" * 104, limits=limits)  # would be valid base64
    assert code_of(exc) == "frame_too_large"


# ---------------------------------------------------------------- WAV


def test_wav_at_any_rate_is_decoded_to_16k_mono():
    stereo = np.stack([tone(440, 1.0, 44_100), tone(440, 1.0, 44_100)], axis=1)
    out = decode_wav(wav_bytes(stereo, 44_100))
    assert out.size == 16_000
    assert dominant_freq(out, 16_000) == pytest.approx(440, abs=2)


def test_stereo_wav_channels_are_averaged():
    left, right = tone(440, 0.5, 16_000), np.zeros(8_000, dtype=np.float32)
    out = decode_wav(wav_bytes(np.stack([left, right], axis=1), 16_000, subtype="FLOAT"))
    np.testing.assert_allclose(out, left / 2, atol=1e-6)


def test_wav_with_nan_samples_is_rejected():
    audio = tone(440, 0.1, 16_000)
    audio[100] = np.nan
    with pytest.raises(AudioError) as exc:
        decode_wav(wav_bytes(audio, 16_000, subtype="FLOAT"))
    assert code_of(exc) == "invalid_audio"
    assert "NaN" in exc.value.message


def test_wav_with_infinite_samples_is_rejected():
    audio = tone(440, 0.1, 16_000)
    audio[5] = np.inf
    with pytest.raises(AudioError) as exc:
        decode_wav(wav_bytes(audio, 16_000, subtype="FLOAT"))
    assert code_of(exc) == "invalid_audio"


@pytest.mark.parametrize(
    "blob",
    [b"not audio at all, just text", b"\x89PNG\r\n\x1a\n" + bytes(200), b"RIFF\x10\x00\x00\x00WAVEfmt "],
    ids=["text", "png", "truncated-riff"],
)
def test_non_audio_bytes_are_rejected_as_wav(blob: bytes):
    with pytest.raises(AudioError) as exc:
        decode_wav(blob)
    assert code_of(exc) == "invalid_audio"


def test_non_wav_audio_file_is_rejected_as_wav():
    import io

    import soundfile as sf

    flac = io.BytesIO()
    sf.write(flac, tone(440, 0.2, 16_000), 16_000, format="FLAC")
    with pytest.raises(AudioError) as exc:
        decode_wav(flac.getvalue())
    assert code_of(exc) == "invalid_audio"
    assert "FLAC" in exc.value.message


def test_over_long_wav_is_rejected():
    with pytest.raises(AudioError) as exc:
        decode_wav(wav_bytes(np.zeros(16_000 * 3, np.float32), 16_000), limits=AudioLimits(max_buffer_s=2.0))
    assert code_of(exc) == "buffer_too_long"


def test_empty_wav_is_rejected():
    with pytest.raises(AudioError) as exc:
        decode_wav(wav_bytes(np.zeros(0, np.float32), 16_000))
    assert code_of(exc) == "empty_audio"


# ---------------------------------------------------------------- AudioBuffer


def frames(audio: np.ndarray, rate: int, ms: int) -> list[bytes]:
    step = rate * ms // 1000
    return [float32_to_pcm16(audio[i : i + step]) for i in range(0, audio.size, step)]


def test_buffer_commit_equals_one_shot_resampling_of_the_whole_turn():
    audio = tone(440, 1.0, 24_000)
    buf = AudioBuffer(rate=24_000)
    streamed = [buf.append(f) for f in frames(audio, 24_000, 20)]
    turn = buf.commit()
    one_shot = decode_pcm16(float32_to_pcm16(audio), rate=24_000)
    assert turn.size == one_shot.size == 16_000
    np.testing.assert_allclose(turn, one_shot, atol=2e-3)  # no clicks at the 20 ms frame boundaries
    assert sum(s.size for s in streamed) <= turn.size


def test_buffer_tracks_session_ms_across_commit_and_clear():
    buf = AudioBuffer(rate=24_000)
    for f in frames(np.zeros(24_000, np.float32), 24_000, 100):  # 1 s
        buf.append(f)
    assert (buf.start_ms, buf.end_ms, buf.duration_ms) == (0, 1000, 1000)
    buf.commit()
    buf.append(float32_to_pcm16(np.zeros(12_000, np.float32)))  # 0.5 s
    assert (buf.start_ms, buf.end_ms) == (1000, 1500)
    buf.clear()
    assert buf.empty and buf.start_ms == 1500


def test_buffer_rejects_append_past_the_limit_and_keeps_what_it_had():
    buf = AudioBuffer(rate=16_000, limits=AudioLimits(max_buffer_s=1.0))
    buf.append(b"\x00\x00" * 12_000)
    with pytest.raises(AudioError) as exc:
        buf.append(b"\x00\x00" * 8_000)
    assert code_of(exc) == "buffer_too_long"
    assert buf.duration_ms == 750
    assert buf.commit().size == 12_000


def test_buffer_rejects_odd_frames_without_changing():
    buf = AudioBuffer(rate=24_000)
    buf.append(b"\x00\x00" * 240)
    with pytest.raises(AudioError):
        buf.append(b"\x00" * 3)
    assert buf.duration_ms == 10


def test_buffer_append_base64_rejects_bad_base64():
    buf = AudioBuffer(rate=24_000)
    with pytest.raises(AudioError) as exc:
        buf.append_base64("@@@@")
    assert code_of(exc) == "invalid_base64"
    assert buf.empty


def test_committing_an_empty_buffer_is_an_error():
    with pytest.raises(AudioError) as exc:
        AudioBuffer().commit()
    assert code_of(exc) == "input_audio_buffer_commit_empty"


def test_buffer_rate_change_only_when_empty():
    buf = AudioBuffer(rate=24_000)
    buf.set_rate(16_000)
    buf.append(b"\x00\x00" * 160)
    with pytest.raises(RuntimeError, match="cannot change"):
        buf.set_rate(24_000)
    with pytest.raises(AudioError):
        AudioBuffer(rate=44_100)
