"""Scoring for `bench voice_out`: a client's playback clock, spoken words, word differences, the summary. No I/O.

Words are compared the way the voice says them: a text goes through the speech path's own
normalizer (``processors.speech_text``: numbers, dates, money, units and ordinals as words, markdown
and URLs as the voice reads them), then ``processors.asr.normalize_words`` (lower case, runs of
``[a-z0-9']``, so punctuation and hyphens split or vanish). Whisper's text goes through the same two
steps, so "$42.50" written back as digits and "forty-two dollars and fifty cents" count as the same.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from bench.common import median
from bench.voices import pct
from processors.asr import normalize_words, word_edits
from processors.speech_text import SpeechText, spoken_text

# the round trip: each has numbers, dates, names, units, money or punctuation the voice must get right
SENTENCES = [
    "On March 3rd, 2024, Dr. Smith paid $42.50 for 3 kg of apples.",
    "The meeting starts at 3:30 pm on Tuesday, June 4th.",
    "Maria flew 1,250 km from Madrid to Berlin in 2019.",
    "About 42% of the 600 students passed the final exam.",
    "The temperature dropped to 5°C overnight in Boston.",
    "Please call Peter at 9 am, not at 10.",
    "She finished the race in 2nd place, 12 seconds behind Anna.",
    "The package weighs 3 kg and costs $12.",
    "Our flight was delayed by 45 minutes; we landed at 11:15 pm.",
    "John bought 7 apples, 12 oranges and 2 melons.",
    "The bridge is 850 m long and 30 m high.",
    "In 1969, Neil Armstrong walked on the Moon.",
    "Add 250 ml of milk, 2 eggs and 100 g of flour.",
    "The 21st century began on January 1st, 2001.",
    "Tom's new laptop has 16 GB of memory and cost $1,200.",
    "We drove 60 mph for 2 hours to reach Chicago.",
    "The river is wide, deep, and very cold in December.",
    "Sarah moved to London on 5/3/2022 with her 2 cats.",
    "Only 3 of the 25 players scored more than 10 points.",
    "Thank you for calling, Emma; have a nice day!",
]


def spoken_words(text: str) -> list[str]:
    """The words ``text`` is spoken as, compared word by word (see the module's docstring)."""
    return normalize_words(spoken_text(SpeechText().feed(text)))


def played_ms(audio: list[tuple[float, float]], at: float) -> float:
    """Milliseconds of audio a client has played by time ``at``: ``audio`` is (arrival s, duration s) per
    delta, in order; the player starts at the first arrival and, when a delta is late, waits for it."""
    played, free_at = 0.0, None
    for arrived, seconds in audio:
        start = arrived if free_at is None else max(free_at, arrived)
        if start >= at:
            break
        played += min(seconds, at - start)
        free_at = start + seconds
    return played * 1000


def stalls_ms(audio: list[tuple[float, float]]) -> list[float]:
    """How long that player sits idle waiting for each late delta (ms; bench/speech_bench.py's ``gaps`` counts them,
    with the same 5 ms of slack)."""
    out: list[float] = []
    free_at: float | None = None
    for arrived, seconds in audio:
        if free_at is not None and arrived > free_at + 0.005:
            out.append(1000 * (arrived - free_at))
            free_at = arrived
        free_at = (arrived if free_at is None else free_at) + seconds
    return out


@dataclass(frozen=True)
class WordDiff:
    """``got`` against ``expected``: word edits (substitutions + deletions + insertions) and what changed."""

    expected: int
    got: int
    errors: int
    changes: tuple[str, ...]  # "expected words → got words" per differing span ("∅": none)


def word_diff(expected: list[str], got: list[str]) -> WordDiff:
    ops = difflib.SequenceMatcher(a=expected, b=got, autojunk=False).get_opcodes()
    changes = tuple(
        f"{' '.join(expected[i1:i2]) or '∅'} → {' '.join(got[j1:j2]) or '∅'}"
        for tag, i1, i2, j1, j2 in ops
        if tag != "equal"
    )
    return WordDiff(len(expected), len(got), word_edits(expected, got), changes)


def round_trip(sentence: str, heard: str) -> dict[str, Any]:
    """One sentence synthesized and heard back: its spoken words against Whisper's."""
    ref, hyp = spoken_words(sentence), spoken_words(heard)
    d = word_diff(ref, hyp)
    return {
        "sentence": sentence,
        "reference": " ".join(ref),
        "heard": heard,
        "words": d.expected,
        "errors": d.errors,
        "changes": list(d.changes),
    }


def corpus_wer(rows: list[dict[str, Any]]) -> float:
    """All sentences' word errors over all their reference words."""
    words = sum(r["words"] for r in rows)
    return sum(r["errors"] for r in rows) / words if words else float("nan")


def truncation(kept: str, heard: str) -> dict[str, Any]:
    """The transcript the server kept after a truncate against the words Whisper hears in the played audio."""
    d = word_diff(spoken_words(kept), spoken_words(heard))
    return {
        "kept": kept,
        "heard": heard,
        "kept_words": d.expected,
        "heard_words": d.got,
        "count_diff": d.got - d.expected,
        "word_errors": d.errors,
        "changes": list(d.changes),
    }


def summary(data: dict[str, Any], wer: float | None) -> list[dict[str, Any]]:
    """One row per measure: value, target, whether it is met."""
    spoken, written = data["turns"]["audio"], data["turns"]["text"]
    window = spoken[0]["window_ms"] if spoken else 500

    def vals(runs: list[dict[str, Any]], key: str) -> list[float]:
        return [r[key] for r in runs if r.get(key) is not None]

    def row(measure: str, value: float | None, target: float | None, note: str = "") -> dict[str, Any]:
        met = None if target is None or value is None else ("yes" if value <= target else "NO")
        return {"measure": measure, "value": value, "target ≤": target, "met": met, "note": note}

    audio_ms, text_ms = vals(spoken, "eos_to_first_audio_ms"), vals(written, "eos_to_first_text_ms")
    pairs = [
        (a.get("eos_to_first_audio_ms"), t.get("eos_to_first_text_ms")) for a, t in zip(spoken, written, strict=False)
    ]
    paired = [a - t for a, t in pairs if a is not None and t is not None]
    firsts = [(r.get("eos_to_first_transcript_ms"), r.get("eos_to_first_audio_ms")) for r in spoken]
    order = [a - t for t, a in firsts if t is not None and a is not None]
    stories, barges = data["stories"], [b for b in data["barge_ins"] if "error" not in b]
    creates = [(s["create_to_first_audio_ms"], s["create_to_first_text_ms"]) for s in stories]
    cold = [a - t for a, t in creates if a is not None and t is not None]
    counts = [abs(b["truncation"]["count_diff"]) for b in barges if "truncation" in b]
    rows = [
        row("eos → first audio delta, median ms", median(audio_ms), window + 200, f"silence window {window} ms"),
        row("eos → first audio delta, p90 ms", pct(audio_ms, 0.9), window + 400, f"{len(audio_ms)} turns"),
        row("eos → first text delta (text replies), median ms", median(text_ms), None, "comparison"),
        row("eos → first text delta (text replies), p90 ms", pct(text_ms, 0.9), None, "comparison"),
        row(
            "first transcript delta → first audio delta, median ms",
            median(order),
            None,
            "a chunk's transcript follows its audio (≤ 0 by design)",
        ),
        row("first chunk → first audio: eos→audio − eos→text, median ms", median(paired), 150, "same utterance"),
        row("first chunk → first audio: create→audio − create→text, median ms", median(cold), 150, "story prompt"),
        row(
            "underrun gaps on long spoken replies",
            sum(s["underruns"] for s in stories) if stories else None,
            0,
            f"{len(stories)} replies, {median([s['spoken_s'] for s in stories]):.1f} s of speech (median)",
        ),
        row(
            "barge-in: speech_started → last audio delta, max ms",
            max((max(0.0, b["started_to_last_delta_ms"]) for b in barges), default=None),
            100,
            f"{sum(b['deltas_after_started'] for b in barges)} deltas after speech_started, {len(barges)} barge-ins",
        ),
        row(
            "truncation: kept vs heard word count, max difference",
            max(counts, default=None),
            1,
            f"{len(counts)} truncated",
        ),
        row("round trip WER %", None if wer is None else 100 * wer, 10, ""),
    ]
    errors = len(data["barge_ins"]) - len(barges) + sum("error" in r for r in spoken + written)
    if errors:
        rows.append(row("runs that failed", errors, 0, "see the JSON"))
    return rows
