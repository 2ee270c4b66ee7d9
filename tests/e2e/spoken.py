"""Helpers of the audio-out client tests: what the server sent (a tap on the in-process server), and what our own
Whisper hears in the audio a client played."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import numpy as np

from processors.asr import AsrConfig, load_asr, normalize_words
from processors.audio import resample

QUESTION = "Please open the kitchen window."
BARGE_IN = "Wait, stop, please turn on the lights instead."


async def tap_server_events(addr: Any, within: float = 30) -> list[dict[str, Any]]:
    """Every event the server sends from now on, on its one session (the server runs in this process).

    Waits for the client's session to exist; the tap is the hook the WebRTC bridge uses to see sent events."""
    seen: list[dict[str, Any]] = []

    def attach() -> bool:
        sessions = list(addr.services.registry.sessions.values())
        if len(sessions) != 1:
            return False
        sessions[0].taps.append(seen.extend)
        return True

    async with asyncio.timeout(within):
        while not addr.call(attach):  # noqa: ASYNC110  (the server thread's state: no event to wait on)
            await asyncio.sleep(0.02)
    return seen


def transcript_of(events: list[dict[str, Any]], item_id: str) -> str:
    """The spoken transcript the server sent for ``item_id`` (its audio transcript deltas)."""
    return "".join(
        e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta" and e["item_id"] == item_id
    )


WINDOW_S = 20  # Whisper hears at most 30 s at once (a longer clip keeps only part): transcribe in pieces


def heard(pcm16_24k: bytes) -> list[str]:
    """The words our Whisper hears in 24 kHz pcm16 audio (a word cut by a piece's edge may be lost)."""
    audio = np.frombuffer(pcm16_24k, dtype=np.int16).astype(np.float32) / 32768.0
    audio16 = resample(audio, 24_000, 16_000)
    step = WINDOW_S * 16_000
    # beam 5: greedy tiny.en now and then hears a whole 20 s piece of the voice as "thanks for watching"
    asr = load_asr(AsrConfig(beam_size=5))
    return [w for i in range(0, len(audio16), step) for w in normalize_words(asr.transcribe(audio16[i : i + step]))]


def overlap(transcript: str, words: list[str]) -> float:
    """The share of the transcript's words that were heard (as a multiset: a word heard once counts once)."""
    said = Counter(normalize_words(transcript))
    if not said:
        return 0.0
    return sum((said & Counter(words)).values()) / sum(said.values())


def conversation_text(addr: Any, item_id: str) -> str:
    """The transcript of ``item_id`` in the server's conversation now (what the next prompt is built from)."""

    def read() -> str:
        (live,) = list(addr.services.registry.sessions.values())
        item = live.session.conversation.get(item_id)
        return "".join(c.get("transcript") or c.get("text") or "" for c in item["content"])

    return str(addr.call(read))
