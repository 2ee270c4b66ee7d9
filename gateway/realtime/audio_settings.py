"""What a session's ``audio.input`` options mean for its voice input, pure: the rate and G.711 format
of the frames, the effective turn detection, what ``session.updated`` reports, the idle timeout, and
which input cleaning (noise reduction, echo cancellation) it gets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from processors.audio import AudioError
from processors.g711 import G711_RATE
from processors.input_clean import NoiseReduction
from processors.vad import ServerVadConfig

from . import protocol as p
from . import transcription

PCM_INPUT_RATE = 24_000  # GA's audio/pcm default


@dataclass(frozen=True)
class AudioIn:
    rate: int  # sample rate of the pcm16 the voice input gets (8 kHz for G.711, decoded first)
    g711: str | None  # "audio/pcmu" | "audio/pcma" when the client sends G.711; None: pcm16
    turn_detection: dict[str, Any] | None  # the effective turn_detection (None: manual turns)


def audio_in(options: p.SessionOptions, default_td: dict[str, Any] | None) -> AudioIn:
    """The voice input a session's options ask for (``default_td``: the server's turn detection)."""
    rate, g711, td = PCM_INPUT_RATE, None, default_td
    given = options.audio.input if options.audio and options.audio.input else None
    if given is not None:
        if given.format is not None:
            rate = given.format.rate if given.format.type == "audio/pcm" else G711_RATE
            g711 = given.format.type if given.format.type != "audio/pcm" else None
        if "turn_detection" in given.model_fields_set:
            td = given.turn_detection
    return AudioIn(rate, g711, transcription.turn_detection(td) if options.type == "transcription" else td)


def describe(view: dict[str, Any], a: AudioIn, listens: bool) -> None:
    """Fill the effective ``audio.input`` into a session's ``view`` (``listens``: the server has Whisper)."""
    if not listens:  # no audio input here: no turn detection, whatever the client asked for
        given = view.get("audio", {}).get("input")
        if given is not None:  # (the Agents SDKs' interrupt() cancels only without server turn detection)
            given["turn_detection"] = None
        return
    try:
        detection = ServerVadConfig.from_turn_detection(a.turn_detection).view() if a.turn_detection else None
    except AudioError:  # refused by check_update before it could be applied; never stored
        return
    given = view.setdefault("audio", {}).setdefault("input", {})
    given["format"] = {"type": a.g711} if a.g711 else {"type": "audio/pcm", "rate": a.rate}
    given["turn_detection"] = detection


def idle_timeout_ms(a: AudioIn) -> int | None:
    """The turn detection's ``idle_timeout_ms`` (None: none, or a setting refused before it applied)."""
    try:
        return ServerVadConfig.from_turn_detection(a.turn_detection).idle_timeout_ms if a.turn_detection else None
    except AudioError:
        return None


def cleaning(options: p.SessionOptions, webrtc: bool) -> tuple[NoiseReduction | None, bool]:
    """(noise reduction type or None, whether to cancel echo). Echo is cancelled unless the client says it
    cancels its own (``echo_cancellation``: ``client`` or null) or is a WebRTC call (its browser does). A client
    with no echo loses nothing to it: the canceller leaves the microphone untouched until it finds the reply in
    it (``processors.echo_presence``), and a session that plays nothing never runs it."""
    given = options.audio.input if options.audio and options.audio.input else None
    noise = given.noise_reduction.type if given is not None and given.noise_reduction else None
    if given is not None and "echo_cancellation" in given.model_fields_set:
        echo = given.echo_cancellation is not None and given.echo_cancellation.type == "server"
    else:
        echo = not webrtc
    return noise, echo
