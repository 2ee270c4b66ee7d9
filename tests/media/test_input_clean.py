"""The input cleaner on synthetic signals: a spoken reply delayed, attenuated and reflected into the microphone
(echo return loss enhancement measured), the user talking over it, a headset with no echo, noise."""

from __future__ import annotations

import numpy as np
import pytest

from processors.echo import FRAME, EchoCanceller, FarEnd, estimate_delay
from processors.echo_presence import PresenceConfig
from processors.input_clean import InputCleaner
from processors.speexdsp import available
from testkit.espeak import speak
from tests.conftest import requires_espeak

pytestmark = [requires_espeak, pytest.mark.skipif(not available(), reason="libspeexdsp1 is not installed")]

RATE = 24_000
REPLY = "Sure. Tomorrow looks sunny with a high of twenty two degrees, and a light breeze from the west."


def i16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1, 1) * 32767).astype(np.int16)


def room(ref: np.ndarray, delay_s: float, db: float) -> np.ndarray:
    """``ref`` as a microphone across the room hears it: delayed, ``db`` down, two reflections."""
    d = int(delay_s * RATE)
    h = np.zeros(d + int(0.08 * RATE))
    h[d], h[d + int(0.02 * RATE)], h[d + int(0.056 * RATE)] = 1.0, 0.35, -0.2
    return np.convolve(ref, h)[: len(ref)] * 10 ** (db / 20)


def db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-9))


def clean(cleaner: InputCleaner, mic: np.ndarray, frame: int = 480) -> np.ndarray:
    out = b"".join(cleaner.push(mic[i : i + frame].tobytes()) for i in range(0, len(mic), frame))
    return np.frombuffer(out, dtype="<i2")


def best_corr(a: np.ndarray, b: np.ndarray, max_lag: int = 600) -> float:
    """Correlation of ``a`` with ``b`` at the lag (the cleaner's few ms of latency) where it is highest."""
    n = min(len(a), len(b) - max_lag)
    return max(float(np.corrcoef(a[:n], b[k : k + n])[0, 1]) for k in range(0, max_lag, 2))


def test_far_end_plays_back_to_back_on_the_microphone_clock_and_stops():
    far = FarEnd()
    far.schedule(np.ones(100, np.int16), at=50)
    far.schedule(2 * np.ones(100, np.int16), at=60)  # sent while the first plays: after it
    far.schedule(3 * np.ones(10, np.int16), at=400)  # sent after a gap: from the present
    assert far.take(40, 20).tolist() == [0] * 10 + [1] * 10
    assert far.take(145, 10).tolist() == [1] * 5 + [2] * 5
    assert far.take(395, 10).tolist() == [0] * 5 + [3] * 5
    assert far.audible(240, 200) and not far.audible(260, 100)
    far.stop(170)
    assert far.take(165, 10).tolist() == [2] * 5 + [0] * 5 and far.end == 170


def test_the_delay_is_found_in_speech():
    ref = speak(REPLY, rate=16_000)[:16_000]
    w, lag = 8_000, 6_400
    for delay in (0, 960, 2_400, 4_000):
        mic = np.concatenate([np.zeros(delay), ref])[: len(ref)] * 0.5
        end = len(ref)
        got, peak = estimate_delay(mic[end - w : end], np.concatenate([np.zeros(lag), ref])[end - w : end + lag], lag)
        assert got == delay and peak > PresenceConfig().min_peak


@pytest.mark.parametrize("delay_s", [0.04, 0.15, 0.3])
def test_the_echo_of_the_reply_is_removed(delay_s):
    reply = speak(REPLY, rate=RATE)
    mic = i16(room(reply, delay_s, -6.0) + np.random.default_rng(0).normal(0, 3e-4, len(reply)))
    cleaner = InputCleaner(RATE)
    cleaner.played(i16(reply).tobytes(), RATE)
    out = clean(cleaner, mic)
    assert cleaner.echo is not None and abs(cleaner.echo.delay / 16 - delay_s * 1000) <= 2  # ms
    erle = db(mic[: len(out)]) - db(out)
    assert erle >= 30, f"echo return loss enhancement {erle:.1f} dB"
    # the microphone passes untouched until the echo is found in it (a client with no echo must lose
    # nothing): what leaks is the echo's first few tens of ms, then it is cancelled from the start on
    found = slice(int((delay_s + 0.08) * RATE), RATE)
    after = db(mic[found]) - db(out[found])
    assert after >= 35, f"from 80 ms after the echo arrives to 1 s: {after:.1f} dB"
    first = db(mic[: RATE // 2]) - db(out[: RATE // 2])
    assert first >= 15, f"first 0.5 s: {first:.1f} dB"


def test_the_user_talking_over_the_reply_is_kept():
    reply, user = speak(REPLY, rate=RATE), speak("Stop, I want to ask something else.", rate=RATE, voice="en-us+f3")
    start = 3 * RATE
    near = np.zeros(len(reply))
    near[start : start + len(user)] = user[: len(reply) - start]
    mic = i16(room(reply, 0.1, -6.0) + near)
    cleaner = InputCleaner(RATE)
    cleaner.played(i16(reply).tobytes(), RATE)
    out = clean(cleaner, mic).astype(np.float64)
    span = slice(start, start + len(user))
    assert best_corr(near[span], out[start:]) >= 0.8  # the echo alone: 0.88 with the raw microphone


def test_a_headset_hears_no_echo_and_the_canceller_never_acts():
    reply, user = speak(REPLY, rate=RATE), speak("Stop, I want to ask something else.", rate=RATE)
    start = RATE  # after the first estimate window, quieter than the reply
    near = np.zeros(len(reply))
    near[start : start + len(user)] = 0.3 * user[: len(reply) - start]
    mic = i16(near + np.random.default_rng(1).normal(0, 3e-4, len(reply)))
    cleaner = InputCleaner(RATE)
    cleaner.played(i16(reply).tobytes(), RATE)
    out = clean(cleaner, mic)
    assert cleaner.echo is not None and not cleaner.echo.presence.found and cleaner.echo.gated == 0
    assert cleaner.echo.touched == 0 and cleaner.cpu_s["echo"] > 0  # it ran all along, and changed nothing:
    assert len(out) >= len(mic) - RATE // 20  # (the resamplers hold back a few ms while streaming)
    assert out.tobytes() == mic[: len(out)].tobytes()  # the microphone as it came, not resampled twice


@pytest.mark.parametrize("start_s", [0.0, 0.1, 0.3, 1.5])
def test_a_barge_in_from_a_client_with_no_echo_passes_byte_for_byte(start_s):
    # an echo-free client's microphone comes out exactly as it went in, the barge-in's first word included,
    # whenever in the reply it starts (the first estimates see it first)
    rate = 16_000
    reply = speak(REPLY, rate=rate)
    user = speak("Wait, stop, I want to ask something else.", rate=rate, voice="en-us+f3")
    start = int(start_s * rate)
    near = np.zeros(len(reply))
    near[start : start + len(user)] = 0.5 * user[: len(reply) - start]
    mic = i16(near + np.random.default_rng(6).normal(0, 3e-4, len(reply)))
    cleaner = InputCleaner(rate)
    cleaner.played(i16(soxr_up(reply, rate)).tobytes(), RATE)
    out = clean(cleaner, mic, frame=320)
    assert cleaner.echo is not None and not cleaner.echo.presence.found
    assert out.tobytes() == mic[: len(out)].tobytes() and len(out) >= len(mic) - 320


def soxr_up(x: np.ndarray, rate: int) -> np.ndarray:
    import soxr

    return soxr.resample(x, rate, RATE)


def test_without_work_the_input_passes_untouched_and_streaming_ends_after_the_echo():
    cleaner = InputCleaner(RATE)
    noise = i16(np.random.default_rng(2).normal(0, 0.05, RATE)).tobytes()
    assert cleaner.idle(960) and cleaner.push(noise[:960]) == noise[:960]
    cleaner.played(i16(np.full(RATE // 10, 0.1)).tobytes(), RATE)  # 100 ms of reply
    assert not cleaner.idle(960)
    for i in range(0, len(noise), 960):
        cleaner.push(noise[i : i + 960])
    assert not cleaner.streaming  # the reference's reach is past: flushed, passing through again
    assert cleaner.idle(960) and cleaner.push(noise[:960]) == noise[:960]


@pytest.mark.parametrize("kind", ["near_field", "far_field"])
def test_noise_reduction_lowers_noise_and_keeps_speech(kind):
    speech = speak("Please open the kitchen window.", rate=RATE)
    noise = np.random.default_rng(3).normal(0, 0.02, len(speech) + RATE)
    clean_in = np.concatenate([np.zeros(RATE), speech])
    out = clean(InputCleaner(RATE, noise=kind, echo_on=False), i16(clean_in + noise)).astype(np.float64)
    noise_only = slice(RATE // 2, RATE)  # after the suppressor has learned the noise
    assert db(out[noise_only]) < db(noise[noise_only] * 32767) - 10
    span = slice(RATE, RATE + len(speech))
    assert best_corr(clean_in[span], out[RATE:]) >= 0.85


def test_the_canceller_costs_little_cpu():
    reply = speak(REPLY, rate=RATE)
    cleaner = InputCleaner(RATE, noise="near_field")
    cleaner.played(i16(reply).tobytes(), RATE)
    clean(cleaner, i16(room(reply, 0.1, -6.0)))
    seconds = len(reply) / RATE
    # 5 % of a core per stage is the budget; on an idle core each takes ≈ 0.5-1 %: a 2x margin for a busy box
    assert cleaner.cpu_s["echo"] / seconds < 0.025 * 2 and cleaner.cpu_s["noise"] / seconds < 0.025 * 2
    assert isinstance(cleaner.echo, EchoCanceller) and cleaner.echo.gated > 0 and FRAME == 160


@pytest.mark.parametrize("rate", [16_000, 8_000])
def test_other_input_rates_cancel_a_24_khz_reply(rate):
    import soxr

    reply = speak(REPLY, rate=RATE)
    heard = soxr.resample(room(reply, 0.1, -6.0), RATE, rate)
    mic = i16(heard + np.random.default_rng(4).normal(0, 3e-4, len(heard)))
    cleaner = InputCleaner(rate)
    cleaner.played(i16(reply).tobytes(), RATE)
    out = clean(cleaner, mic, frame=rate // 50)
    assert len(out) > 0.95 * len(mic)
    assert db(mic[: len(out)]) - db(out) >= 30
