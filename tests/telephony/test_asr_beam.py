"""``audio.beam_size``: the configured beam reaches the Whisper that transcribes calls, and changes what it hears."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from gateway.core.config import load_config
from tests.conftest import requires_espeak


def test_audio_beam_size_reaches_the_transcriber(monkeypatch: pytest.MonkeyPatch):
    import processors.asr
    import processors.vad
    from gateway.wiring.loading import load_audio

    got: list[Any] = []
    monkeypatch.setattr(processors.asr, "load_asr", lambda config: got.append(config) or config)
    monkeypatch.setattr(processors.vad, "SileroVad", lambda: None)
    load_audio(load_config(None, **{"audio.beam_size": 5}))
    load_audio(load_config(None))
    assert [c.beam_size for c in got] == [5, 1]


@requires_espeak
def test_beam_five_hears_a_phone_line_where_greedy_mishears():
    """µ-law 8 kHz espeak-ng speech, as bench/phone.py makes it: greedy tiny.en hears "the capital on France",
    beam 5 the sentence (the same in every resampler tried: soxr HQ and VHQ, polyphase)."""
    from processors.asr import AsrConfig, load_asr, word_error_rate
    from processors.audio import resample
    from processors.g711 import ulaw_decode
    from testkit.espeak import speak
    from testkit.phonecall import to_ulaw

    text = "What is the capital of France?"
    phone = resample(ulaw_decode(to_ulaw(speak(text))).astype(np.float32) / 32768.0, 8000, 16_000)
    greedy = load_asr(AsrConfig())
    beam = load_asr(dataclasses.replace(greedy.config, beam_size=5))
    assert word_error_rate(text, greedy.transcribe(phone)) > 0
    assert word_error_rate(text, beam.transcribe(phone)) == 0
