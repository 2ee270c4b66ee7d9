"""A session's voice input: pcm16 frames → 16 kHz audio → (server VAD) → turns to transcribe.

Synchronous and free of sockets: the connection feeds it frames and acts on what it returns.
Turn detection follows ``session.audio.input.turn_detection``: ``server_vad`` (default, as in
OpenAI's API) cuts turns itself; ``null`` means the client commits them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from processors.audio import AudioBuffer, AudioError, AudioLimits, check_rate
from processors.vad import ServerVad, ServerVadConfig, SpeechPaused, SpeechResumed, SpeechStarted, SpeechStopped

IDLE_TRIM_MS = 5_000  # in server-VAD mode, silence buffered beyond this is dropped


@dataclass
class Turn:
    """A finished user turn to transcribe."""

    audio: np.ndarray  # float32 [n] at 16 kHz
    start_ms: int
    end_ms: int


VoiceEvent = SpeechStarted | SpeechPaused | SpeechResumed | Turn


class VoiceInput:
    def __init__(self, limits: AudioLimits, turn_detection: dict[str, Any] | None, rate: int = 24_000):
        self.limits = limits
        self.buffer = AudioBuffer(rate=rate, limits=limits)
        self.vad: ServerVad | None = None
        self.vad_config: ServerVadConfig | None = None
        self.configure(rate, turn_detection)

    @staticmethod
    def check(limits: AudioLimits, turn_detection: dict[str, Any] | None, rate: int) -> None:
        """Raise ``AudioError`` for settings ``configure`` would refuse, without loading the VAD model
        (a ``session.update`` or a client secret is checked on the event loop)."""
        check_rate(rate, limits)
        if turn_detection is not None:
            ServerVadConfig.from_turn_detection(turn_detection)

    def configure(self, rate: int, turn_detection: dict[str, Any] | None) -> None:
        """Apply ``audio.input`` settings; raises ``AudioError`` (nothing changes then)."""
        check_rate(rate, self.limits)
        cfg = ServerVadConfig.from_turn_detection(turn_detection) if turn_detection is not None else None
        if rate != self.buffer.rate:
            if not self.buffer.empty:
                self.buffer.clear()
            self.buffer.set_rate(rate)
        self.vad_config = cfg
        if cfg is None:
            self.vad = None
        elif self.vad is None:
            self.vad = ServerVad(cfg, pauses=True)
        else:
            self.vad.update(cfg)

    @property
    def now_ms(self) -> int:
        """Session-clock ms of the audio the VAD has analysed (0 without server VAD)."""
        return self.vad.now_ms if self.vad is not None else 0

    @property
    def in_speech(self) -> bool:
        return self.vad is not None and self.vad.in_speech

    def append(self, raw: bytes) -> list[VoiceEvent]:
        """One pcm16 frame. Returns speech starts, pauses, resumptions and finished turns (server VAD only)."""
        samples = self.buffer.append(raw)
        if self.vad is None:
            return []
        out: list[VoiceEvent] = []
        for ev in self.vad.feed(samples):
            if isinstance(ev, SpeechStarted | SpeechPaused | SpeechResumed):
                out.append(ev)
            elif isinstance(ev, SpeechStopped):
                assert ev.audio is not None
                out.append(Turn(ev.audio, ev.audio_start_ms, ev.audio_end_ms))
                self.buffer.clear()  # the turn's audio came from the VAD; the buffer restarts
        if not self.vad.in_speech and self.buffer.duration_ms > IDLE_TRIM_MS:
            self.buffer.clear()  # silence between turns: keep memory bounded
        return out

    def commit(self) -> Turn:
        """Manual turn end (``input_audio_buffer.commit``)."""
        start = self.buffer.start_ms
        audio = self.buffer.commit()
        if self.vad is not None:
            self.vad.reset()
        return Turn(audio, start, self.buffer.start_ms)

    def clear(self) -> None:
        self.buffer.clear()
        if self.vad is not None:
            self.vad.reset()


__all__ = ["AudioError", "SpeechPaused", "SpeechResumed", "SpeechStarted", "Turn", "VoiceEvent", "VoiceInput"]
