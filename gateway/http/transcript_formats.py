"""The bodies of ``POST /v1/audio/transcriptions``: text, json, verbose_json, srt, vtt and the SSE events. Pure.

A transcript is a list of ``CaptionSegment`` (a speech segment's place in the file and Whisper's words for it),
rendered in OpenAI's shapes. What the embedded Whisper does not report is left out rather than made up:
no ``logprobs``, no ``words``, and no ``tokens`` / ``avg_logprob`` / ``no_speech_prob`` on a segment (the
shared worker returns text only; docs/PROTOCOL.md). ``compression_ratio`` is computed from the text, as
Whisper computes it; ``temperature`` is 0 because decoding is always greedy.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
MEDIA = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "text/plain; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
LANGUAGE_NAMES = {"en": "english"}  # verbose_json names the language as Whisper does; others by their code


@dataclass(frozen=True)
class CaptionSegment:
    """A segment's words and where it lies in the file (seconds)."""

    start_s: float
    end_s: float
    text: str


def spoken(pieces: list[CaptionSegment]) -> list[CaptionSegment]:
    """The pieces that hold words (a segment Whisper heard nothing in is no segment of the transcript)."""
    return [CaptionSegment(p.start_s, p.end_s, p.text.strip()) for p in pieces if p.text.strip()]


def full_text(pieces: list[CaptionSegment]) -> str:
    return " ".join(p.text for p in spoken(pieces))


def usage(seconds: float) -> dict[str, Any]:
    """Whisper is billed (and reported) by the audio's duration."""
    return {"type": "duration", "seconds": round(max(0.0, seconds), 3)}


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return round(len(raw) / len(zlib.compress(raw)), 3) if raw else 0.0


def verbose(pieces: list[CaptionSegment], seconds: float, language: str | None) -> dict[str, Any]:
    said = spoken(pieces)
    segments = [
        {
            "id": i,
            "seek": round(p.start_s * 100),  # in Whisper's 10 ms frames, where this segment's audio starts
            "start": round(p.start_s, 3),
            "end": round(p.end_s, 3),
            "text": p.text,
            "temperature": 0.0,
            "compression_ratio": compression_ratio(p.text),
        }
        for i, p in enumerate(said)
    ]
    name = LANGUAGE_NAMES.get(language or "", language or "unknown")
    return {
        "task": "transcribe",
        "language": name,
        "duration": round(seconds, 3),
        "text": full_text(pieces),
        "segments": segments,
        "usage": usage(seconds),
    }


def timestamp(seconds: float, decimal: str) -> str:
    """``HH:MM:SS,mmm`` (SRT, ``decimal=","``) or ``HH:MM:SS.mmm`` (WebVTT)."""
    ms = max(0, round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{decimal}{ms:03d}"


def srt(pieces: list[CaptionSegment]) -> str:
    cues = [
        f"{i}\n{timestamp(p.start_s, ',')} --> {timestamp(p.end_s, ',')}\n{p.text}\n"
        for i, p in enumerate(spoken(pieces), 1)
    ]
    return "\n".join(cues)


def vtt(pieces: list[CaptionSegment]) -> str:
    cues = [f"{timestamp(p.start_s, '.')} --> {timestamp(p.end_s, '.')}\n{p.text}\n" for p in spoken(pieces)]
    return "WEBVTT\n\n" + "\n".join(cues)


def render(fmt: str, pieces: list[CaptionSegment], seconds: float, language: str | None) -> tuple[str, str]:
    """(body, media type) of a whole transcript in ``fmt`` (one of ``FORMATS``)."""
    if fmt == "text":
        return full_text(pieces) + "\n", MEDIA[fmt]
    if fmt == "srt":
        return srt(pieces), MEDIA[fmt]
    if fmt == "vtt":
        return vtt(pieces), MEDIA[fmt]
    if fmt == "verbose_json":
        return json.dumps(verbose(pieces, seconds, language)), MEDIA[fmt]
    return json.dumps({"text": full_text(pieces), "usage": usage(seconds)}), MEDIA["json"]


def sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


def delta_event(text: str, first: bool) -> dict[str, Any]:
    """A segment's words as a ``transcript.text.delta``: the deltas add up to the done event's text."""
    return {"type": "transcript.text.delta", "delta": text.strip() if first else " " + text.strip()}


def done_event(pieces: list[CaptionSegment]) -> dict[str, Any]:
    """``transcript.text.done``. GA's usage there counts tokens, which Whisper's text-only passes do not report:
    left out (the JSON body's duration usage has the audio's length)."""
    return {"type": "transcript.text.done", "text": full_text(pieces)}
