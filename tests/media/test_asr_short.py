"""The short encoder input (``AsrConfig.encoder_headroom_s``): how many mel frames a clip gets, and
that faster-whisper tiny.en gives the same words on it as on Whisper's full 30 s (real espeak-ng speech)."""

from __future__ import annotations

import numpy as np
import pytest

from processors.asr import (
    DEFAULT_HEADROOM_S,
    FULL_FRAMES,
    AsrConfig,
    AsrError,
    FasterWhisper,
    encoder_frames,
    load_asr,
    normalize_words,
    repeats,
)
from testkit.espeak import silence, speak
from tests.conftest import requires_espeak

pytestmark = pytest.mark.real_model  # Whisper tiny.en

# ---------------------------------------------------------------- pure: the frame count


@pytest.mark.parametrize(
    ("seconds", "headroom", "frames"),
    [
        (0.0, 6.0, 600),
        (1.0, 6.0, 700),
        (1.01, 6.0, 800),  # rounded up to the next whole second
        (2.5, 0.0, 300),
        (2.5, 0.5, 300),
        (23.9, 6.0, 3000),
        (24.01, 6.0, FULL_FRAMES),  # never past Whisper's 30 s
        (45.0, 6.0, FULL_FRAMES),
        (2.0, None, FULL_FRAMES),  # None: always 30 s
    ],
)
def test_encoder_frames_follow_the_audio_plus_headroom(seconds: float, headroom: float | None, frames: int):
    assert encoder_frames(round(seconds * 16_000), headroom) == frames


def test_encoder_frames_are_even_and_never_shorter_than_the_audio():
    for n in range(0, 40 * 16_000, 1_237):
        for headroom in (0.0, 0.3, 2.0, 6.0):
            frames = encoder_frames(n, headroom)
            assert frames % 2 == 0  # the encoder's stride-2 convolution
            assert frames * 160 >= min(n, FULL_FRAMES * 160)
            assert frames <= FULL_FRAMES


def test_headroom_is_checked():
    with pytest.raises(AsrError, match="encoder_headroom_s"):
        AsrConfig(encoder_headroom_s=-1.0)
    with pytest.raises(AsrError, match="encoder_headroom_s"):
        AsrConfig(encoder_headroom_s=31.0)


def test_repeats_finds_a_loop_of_three_or_more_words():
    assert repeats(normalize_words("What time is it? What time is it?"))
    assert repeats(normalize_words("turn on the lights in the kitchen, turn on the lights in the kitchen"))
    assert not repeats(normalize_words("Please turn on the lights in the kitchen."))
    assert not repeats(normalize_words("no no, I said no"))  # two words twice is speech, not a loop


# ---------------------------------------------------------------- real model

CLIPS = [
    "Please turn on the lights in the kitchen.",
    "What is the weather going to be like tomorrow morning?",
    "My favorite color is blue.",
    "Can you tell me a joke about cats?",
]


@pytest.fixture(scope="module")
def full():
    return load_asr(AsrConfig(encoder_headroom_s=None))


@pytest.fixture(scope="module")
def short():
    asr = load_asr(AsrConfig(encoder_headroom_s=DEFAULT_HEADROOM_S))  # the short input (the default)
    assert isinstance(asr, FasterWhisper) and asr.config.encoder_headroom_s is not None
    return asr


@requires_espeak
@pytest.mark.parametrize("text", CLIPS)
def test_the_short_input_gives_the_words_of_the_full_pass(text, full, short, monkeypatch):
    audio = np.concatenate([silence(0.3), speak(text), silence(0.1)])  # a turn: prefix padding, the pause
    frames: list[int] = []
    real = short._short.transcribe

    def spy(a: list[np.ndarray], n: int) -> list[str | None]:
        frames.append(n)
        return real(a, n)

    monkeypatch.setattr(short._short, "transcribe", spy)
    redone = short.redone
    words = normalize_words(short.transcribe(audio))
    assert frames == [encoder_frames(audio.size, short.config.encoder_headroom_s)] and frames[0] < FULL_FRAMES
    assert short.redone == redone  # the short pass's own text, not a redo on 30 s
    assert words == normalize_words(full.transcribe(audio))
    assert words == normalize_words(text)


@requires_espeak
def test_a_looping_short_pass_is_redone_on_30_s(full, short, monkeypatch):
    audio = np.concatenate([silence(0.3), speak("What time is it?"), silence(0.1)])
    monkeypatch.setattr(short._short, "transcribe", lambda a, n: [None] * len(a))  # as when its text loops
    redone = short.redone
    assert short.transcribe(audio) == full.transcribe(audio)
    assert short.redone == redone + 1


@pytest.mark.parametrize("seconds", [0.3, 0.6, 1.0, 3.0])
def test_silence_stays_empty_on_the_short_input(short, seconds):
    assert short.transcribe(silence(seconds)) == ""  # 0.6 s and 1 s decoded to a lone "."; 3 s looped on "."
