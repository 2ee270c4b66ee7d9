"""What a spoken reply asks of the voice pipeline and gets back: the settings in force, a chunk to
synthesize, audio to play or played, a chunk's audio with its word timings. Pure data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeechSettings:
    """``audio.output`` in force for a response."""

    format: str = "audio/pcm"  # wire format of output_audio.delta
    voice: str = "joe"  # an installed voice's name
    speed: float = 1.0  # 0.25–1.5


@dataclass(frozen=True)
class Speak:
    """Action: synthesize chunk ``index`` of ``response_id`` (``text``: the words to say, maybe "")."""

    response_id: str
    index: int
    text: str
    settings: SpeechSettings


@dataclass(frozen=True)
class PlayAudio:
    """Action: play a chunk of ``item_id`` on the call's outbound track (``audio``: in ``format``)."""

    response_id: str
    item_id: str
    audio: bytes
    format: str


@dataclass(frozen=True)
class Played:
    """Action: ``audio`` (in ``format``) went to the client in ``output_audio.delta``: it plays from now on
    (the echo reference of the session's input cleaner)."""

    audio: bytes
    format: str


@dataclass(frozen=True)
class SpeechResult:
    """Chunk ``index``'s audio in the response's wire format, and where each of its words ends (ms
    from the chunk's start, one per whitespace-separated word of ``Speak.text``)."""

    response_id: str
    index: int
    audio: bytes
    word_ends_ms: tuple[float, ...]
