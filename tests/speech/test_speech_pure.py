"""Speech output's pure parts: G.711 against the reference codec, text for the voice, truncation marks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gateway.realtime.speech_out import heard_length, usage_with_audio
from processors.audio_formats import bytes_to_ms, encode, g711_to_pcm16, ms_to_bytes
from processors.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from processors.speech_text import SpeechText, spoken_text

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # the reference G.711 (Python ≤ 3.12), only to check ours against


ALL_INT16 = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))


def test_ulaw_matches_the_reference_codec_on_every_value() -> None:
    assert ulaw_encode(ALL_INT16) == audioop.lin2ulaw(ALL_INT16.tobytes(), 2)
    assert ulaw_decode(ALL_CODES).tobytes() == audioop.ulaw2lin(ALL_CODES, 2)


def test_alaw_matches_the_reference_codec_on_every_value() -> None:
    assert alaw_encode(ALL_INT16) == audioop.lin2alaw(ALL_INT16.tobytes(), 2)
    assert alaw_decode(ALL_CODES).tobytes() == audioop.alaw2lin(ALL_CODES, 2)


@pytest.mark.parametrize("fmt", ["audio/pcmu", "audio/pcma"])
def test_g711_round_trip_keeps_a_tone(fmt: str) -> None:
    t = np.arange(22050) / 22050
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    wire = encode(tone, 22050, fmt)
    assert len(wire) == 8000  # one byte per sample at 8 kHz
    back = np.frombuffer(g711_to_pcm16(wire, fmt), dtype="<i2").astype(np.float32) / 32768
    ref = (0.5 * np.sin(2 * np.pi * 440 * np.arange(8000) / 8000)).astype(np.float32)
    corr = np.corrcoef(back[200:-200], ref[200:-200])[0, 1]
    assert corr > 0.99


def test_pcm_output_is_24khz_pcm16() -> None:
    wire = encode(np.zeros(22050, np.float32), 22050, "audio/pcm")
    assert len(wire) == 48000
    assert bytes_to_ms("audio/pcm", len(wire)) == pytest.approx(1000.0)
    assert ms_to_bytes("audio/pcmu", 250) == 2000


def said(*chunks: str) -> str:
    st = SpeechText()
    out = []
    for c in chunks:
        pieces = st.feed(c)
        assert "".join(p.source for p in pieces) == c  # the transcript keeps the text exactly
        out.append(spoken_text(pieces))
    return " ".join(o for o in out if o)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("It costs $12.50 today.", "It costs twelve dollars and fifty cents today."),
        ("About 42% of 1,200 people.", "About forty-two percent of one thousand, two hundred people."),
        ("Born in 1990, on 2024-03-05.", "Born in nineteen ninety, on March fifth, twenty twenty-four."),
        ("Meet at 3:30 pm", "Meet at three thirty p m"),
        ("It is 5 km away and 20°C.", "It is five kilometers away and twenty degrees Celsius."),
        ("The 3rd try", "The third try"),
        ("**Bold** and _soft_ words", "Bold and soft words"),
        ("See https://www.example.com/docs?a=1 now", "See example dot com now"),
        ("Great job 🎉🚀!", "Great job !"),
        ("Write to ann@mail.example.org", "Write to ann at mail dot example dot org"),
        ("Use `pip install` here", "Use pip install here"),
        ("a [link](http://x.y/z) here", "a link here"),
    ],
)
def test_text_is_said_as_words(text: str, expect: str) -> None:
    assert said(text) == expect


def test_code_fences_are_skipped_across_chunks() -> None:
    spoken = said("Here is code:\n```python\nx = 1\n", "print(x)\n", "```\nDone.")
    assert spoken == "Here is code: Done."


def test_markdown_line_marks_are_not_read() -> None:
    assert said("# Title\n- one item\n> quoted\n") == "Title one item quoted"


def test_heard_length_counts_a_piece_once_past_its_middle() -> None:
    marks = [(100.0, 6), (300.0, 12), (500.0, 20)]  # pieces end at 100, 300, 500 ms
    assert heard_length(marks, 0) == 0
    assert heard_length(marks, 60) == 6
    assert heard_length(marks, 190) == 6
    assert heard_length(marks, 210) == 12
    assert heard_length(marks, 10_000) == 20


def test_usage_splits_text_and_audio() -> None:
    u = usage_with_audio({"output_tokens": 10, "total_tokens": 30, "input_tokens": 20}, 1000.0)
    assert u["output_token_details"] == {"text_tokens": 10, "audio_tokens": 20}
    assert u["output_tokens"] == 30 and u["total_tokens"] == 50
