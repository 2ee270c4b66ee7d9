"""The transcription bodies (json, text, verbose_json, srt, vtt, SSE) and the VAD's segments of a file. Pure.

The VAD here runs on a made-up speech-probability model (loud window: speech), so segment bounds are exact.
"""

from __future__ import annotations

import json

import numpy as np
from openai.types.audio import TranscriptionTextDeltaEvent, TranscriptionTextDoneEvent

from gateway.http import transcript_formats as tf
from processors.audio import TARGET_RATE
from processors.segments import speech_segments
from processors.vad import ServerVadConfig

PIECES = [
    tf.CaptionSegment(0.7, 2.0, " Hello there. "),
    tf.CaptionSegment(2.5, 3.0, "  "),
    tf.CaptionSegment(3723.4561, 3725.0, "Bye."),
]


def test_srt_numbers_cues_and_skips_segments_without_words():
    assert tf.srt(PIECES) == (
        "1\n00:00:00,700 --> 00:00:02,000\nHello there.\n\n2\n01:02:03,456 --> 01:02:05,000\nBye.\n"
    )


def test_vtt_has_its_header_and_dotted_times():
    assert (
        tf.vtt(PIECES)
        == "WEBVTT\n\n00:00:00.700 --> 00:00:02.000\nHello there.\n\n01:02:03.456 --> 01:02:05.000\nBye.\n"
    )


def test_json_text_and_verbose_json():
    body, media = tf.render("json", PIECES, 3725.0, "en")
    assert media == "application/json"
    assert json.loads(body) == {"text": "Hello there. Bye.", "usage": {"type": "duration", "seconds": 3725.0}}
    text, media = tf.render("text", PIECES, 3725.0, "en")
    assert text == "Hello there. Bye.\n" and media.startswith("text/plain")
    verbose = json.loads(tf.render("verbose_json", PIECES, 3725.0, "en")[0])
    assert verbose["language"] == "english" and verbose["duration"] == 3725.0 and verbose["task"] == "transcribe"
    assert [(s["id"], s["start"], s["end"], s["text"]) for s in verbose["segments"]] == [
        (0, 0.7, 2.0, "Hello there."),
        (1, 3723.456, 3725.0, "Bye."),
    ]
    assert verbose["segments"][0]["seek"] == 70 and verbose["segments"][0]["temperature"] == 0.0
    assert 0 < verbose["segments"][0]["compression_ratio"] < 2
    for absent in ("avg_logprob", "no_speech_prob", "tokens"):  # not reported by the worker: not invented
        assert absent not in verbose["segments"][0]
    assert json.loads(tf.render("verbose_json", [], 1.0, None)[0])["language"] == "unknown"


def test_stream_deltas_add_up_to_the_done_text_and_are_the_sdk_event_types():
    deltas = [tf.delta_event("Hello there.", first=True), tf.delta_event(" Bye. ", first=False)]
    done = tf.done_event(PIECES)
    for d in deltas:
        TranscriptionTextDeltaEvent.model_validate(d)
    TranscriptionTextDoneEvent.model_validate(done)
    assert "".join(d["delta"] for d in deltas) == done["text"] == "Hello there. Bye."
    assert tf.sse(done) == b'data: {"type": "transcript.text.done", "text": "Hello there. Bye."}\n\n'


class LoudIsSpeech:
    """A speech-probability model: a window is speech when it is loud."""

    def __call__(self, window: np.ndarray) -> float:
        return 1.0 if float(np.abs(window).max()) > 0.05 else 0.0

    def reset(self) -> None:
        pass


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * TARGET_RATE)) / TARGET_RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def _quiet(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * TARGET_RATE), dtype=np.float32)


def test_segments_follow_the_server_vad_and_a_turn_open_at_the_end_is_closed():
    audio = np.concatenate([_quiet(1.0), _tone(1.0), _quiet(1.0), _tone(1.5)])  # ends mid-speech
    cfg = ServerVadConfig(prefix_padding_ms=300, silence_duration_ms=500)
    segs = speech_segments(audio, cfg, model=LoudIsSpeech())
    assert len(segs) == 2
    (a, b) = segs
    assert abs(a.start_ms - 700) <= 32 and abs(a.end_ms - 2000) <= 64  # the padding before, not the silence after
    assert abs(b.start_ms - 2700) <= 32 and b.end_ms == 4500  # never past the file's end
    assert a.audio.size >= (a.end_ms - a.start_ms) * TARGET_RATE // 1000


def test_a_long_turn_is_split_into_whisper_windows_and_silence_has_no_segments():
    segs = speech_segments(_tone(70.0), ServerVadConfig(), model=LoudIsSpeech())
    assert len(segs) == 3
    assert all(s.audio.size <= 30 * TARGET_RATE for s in segs)
    assert segs[0].start_ms == 0 and segs[-1].end_ms == 70_000
    assert all(x.end_ms <= y.start_ms + 1 for x, y in zip(segs, segs[1:], strict=False))
    assert speech_segments(_quiet(5.0), ServerVadConfig(), model=LoudIsSpeech()) == []
