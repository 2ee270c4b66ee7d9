"""Transcription sessions (``session.type: "transcription"``): their turn detection, their view, what they refuse. Pure.

A transcription session is a realtime session whose audio is only segmented and transcribed: the same
voice path (VAD, turn taking, the shared Whisper worker), with every way to a reply closed. Its turn
detection never creates or interrupts a response and has no idle timeout (that timeout's only purpose is
to prompt a reply), so no speculation prepares one either (its pause passes, Whisper only, still pace
``semantic_vad``); ``response.create`` is refused. Nothing is
decoded by the language model, ever.

Logprobs: ``include: ["item.input_audio_transcription.logprobs"]`` is accepted and echoed, but the
embedded Whisper is run for text only (batched passes shared by every session), so transcription
events carry no ``logprobs``; claiming some would be inventing them.
"""

from __future__ import annotations

from typing import Any

LOGPROBS = "item.input_audio_transcription.logprobs"
INTENTS = ("transcription",)  # ``?intent=`` values /v1/realtime knows (GA has this one)

# the realtime view's audio.input fields a transcription session reports (GA's RealtimeTranscriptionSessionAudioInput)
_AUDIO_INPUT_FIELDS = ("format", "noise_reduction", "transcription", "turn_detection")
# a turn detection field that means nothing without replies: the silence after one that prompts another
_REPLY_ONLY = ("idle_timeout_ms",)


def turn_detection(td: dict[str, Any] | None) -> dict[str, Any] | None:
    """A transcription session's turn detection: turns are cut as asked, never answered, never interrupting."""
    if td is None:
        return None
    out = {k: v for k, v in td.items() if k not in _REPLY_ONLY}
    out.update(create_response=False, interrupt_response=False)  # so no reply is prepared unseen either
    return out


def view(realtime_view: dict[str, Any]) -> dict[str, Any]:
    """GA's transcription-session object (``RealtimeTranscriptionSessionCreateRequest`` and its id) from the
    session's realtime view, its effective ``audio.input`` already filled in."""
    audio_in = realtime_view.get("audio", {}).get("input") or {}
    shown = {k: audio_in[k] for k in _AUDIO_INPUT_FIELDS if k in audio_in}
    td = shown.get("turn_detection")
    if isinstance(td, dict):
        shown["turn_detection"] = {k: v for k, v in td.items() if k not in _REPLY_ONLY}
    out: dict[str, Any] = {
        "type": "transcription",
        "id": realtime_view.get("id"),
        "object": "realtime.transcription_session",
        "audio": {"input": shown},
    }
    if realtime_view.get("include"):
        out["include"] = list(realtime_view["include"])
    return out


NO_RESPONSES = (
    'a transcription session creates no responses (session.type is "transcription"); '
    'send session.update with session.type "realtime" to get replies'
)


def intent_error(intent: str) -> str | None:
    """Why ``?intent=<intent>`` is refused, or None when it is known."""
    if intent in INTENTS:
        return None
    return f"intent {intent[:64]!r} is not known here (known: {', '.join(INTENTS)})"
