"""bench voice_out's scoring: the client's playback clock, words as the voice says them, word differences and
the summary's targets (pure: no server, no model)."""

from __future__ import annotations

import math
from typing import Any

from bench.speech_bench import gaps
from bench.voice_out_score import (
    SENTENCES,
    corpus_wer,
    played_ms,
    round_trip,
    spoken_words,
    stalls_ms,
    summary,
    truncation,
    word_diff,
)


def test_the_playback_clock_starts_at_the_first_delta_and_waits_for_a_late_one() -> None:
    on_time = [(10.0, 0.5), (10.1, 0.5)]
    assert played_ms(on_time, 9.0) == 0
    assert math.isclose(played_ms(on_time, 10.7), 700)
    assert math.isclose(played_ms(on_time, 99.0), 1000)  # never more than was received
    late = [(10.0, 0.5), (11.0, 0.5)]  # the player sat idle from 10.5 to 11.0
    assert math.isclose(played_ms(late, 10.8), 500)
    assert math.isclose(played_ms(late, 11.2), 700)
    assert stalls_ms(on_time) == [] and [round(x) for x in stalls_ms(late)] == [500]
    assert gaps(late)[0] == len(stalls_ms(late))  # the same underruns bench/speech_bench.py counts


def test_words_are_compared_as_the_voice_says_them() -> None:
    assert spoken_words("Dr. Smith paid $42.50 for 3 kg.") == (
        "dr smith paid forty two dollars and fifty cents for three kilograms".split()
    )
    # Whisper writing digits back counts as the words the voice said
    assert round_trip("He paid $12 on March 3rd.", "He paid 12 dollars on March third")["errors"] == 0
    assert spoken_words("In 2019, she won!") == ["in", "twenty", "nineteen", "she", "won"]


def test_word_diff_counts_edits_and_names_them() -> None:
    d = word_diff("the cat sat".split(), "the dog sat down".split())
    assert (d.expected, d.got, d.errors) == (3, 4, 2)
    assert d.changes == ("cat → dog", "∅ → down")
    assert word_diff([], ["a"]).errors == 1


def test_round_trip_reports_each_sentence_and_the_corpus_rate() -> None:
    rows = [round_trip("The store is closed on Sunday.", "The store is closed on Monday."), round_trip("Hi there.", "")]
    assert rows[0]["errors"] == 1 and rows[0]["changes"] == ["sunday → monday"]
    assert rows[1]["errors"] == 2
    assert math.isclose(corpus_wer(rows), 3 / 8)
    assert len(SENTENCES) == 20 and len(set(SENTENCES)) == 20


def test_truncation_compares_word_counts() -> None:
    t = truncation("Once upon a time, there was", "once upon a time there")
    assert (t["kept_words"], t["heard_words"], t["count_diff"]) == (6, 5, -1)
    assert t["changes"] == ["was → ∅"]


def _turn(modality: str, first: float) -> dict[str, Any]:
    key = "eos_to_first_audio_ms" if modality == "audio" else "eos_to_first_text_ms"
    return {"window_ms": 500, key: first, "eos_to_first_transcript_ms": first + 1}


def test_the_summary_checks_each_target() -> None:
    data = {
        "turns": {"audio": [_turn("audio", ms) for ms in (650, 690, 980)], "text": [_turn("text", 600)] * 3},
        "stories": [{"create_to_first_audio_ms": 400, "create_to_first_text_ms": 300, "underruns": 1, "spoken_s": 30}],
        "barge_ins": [
            {"started_to_last_delta_ms": -20.0, "deltas_after_started": 0, "truncation": {"count_diff": -1}},
            {"error": "TimeoutError()"},
        ],
    }
    rows = {r["measure"]: r for r in summary(data, 0.05)}
    audio_median = rows["eos → first audio delta, median ms"]
    assert (audio_median["value"], audio_median["target ≤"], audio_median["met"]) == (690, 700, "yes")
    assert rows["eos → first audio delta, p90 ms"]["met"] == "NO"  # 980 > 900
    assert rows["first chunk → first audio: eos→audio − eos→text, median ms"]["value"] == 90
    assert rows["first chunk → first audio: create→audio − create→text, median ms"]["met"] == "yes"
    by_design = rows["first transcript delta → first audio delta, median ms"]
    assert (by_design["value"], by_design["met"]) == (-1, None)  # the transcript follows its audio: no target
    assert rows["underrun gaps on long spoken replies"]["met"] == "NO"
    assert rows["barge-in: speech_started → last audio delta, max ms"]["value"] == 0
    assert rows["truncation: kept vs heard word count, max difference"]["met"] == "yes"
    assert rows["round trip WER %"]["value"] == 5
    assert rows["runs that failed"]["value"] == 1
