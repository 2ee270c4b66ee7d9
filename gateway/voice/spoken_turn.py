"""A VAD turn as the voice input holds it while it is spoken and transcribed, and the engine side of
speculation it prepares replies through. Data only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from processors.audio import TARGET_RATE
from processors.turn_end import EndOfTurn, windows_for
from processors.vad import ServerVadConfig

from .turntaking import TurnCompleted, TurnConfig, TurnTaker


@dataclass
class PauseSignals:
    """When the latest pause's end-of-turn signals came in (wall clock, s): where a turn's wait went."""

    paused_at: float | None = None  # the pause was reported: the model and the pause pass were asked
    scored_at: float | None = None  # the model's answer reached the loop
    model_s: float | None = None  # the model's own compute time for it
    text_at: float | None = None  # the pause transcript reached the loop

    def summary(self, stopped_at: float) -> str:
        """One log line's worth: each signal's arrival (and the turn's end) in ms after the pause."""

        def after(t: float | None) -> str:
            return "not in" if t is None or self.paused_at is None else f"+{(t - self.paused_at) * 1000:.0f} ms"

        compute = "" if self.model_s is None else f" ({self.model_s * 1000:.0f} ms compute)"
        return f"model {after(self.scored_at)}{compute}, text {after(self.text_at)}, stop {after(stopped_at)}"


@dataclass
class SpokenTurn:
    """A VAD turn being spoken or transcribed: its item, its state machine, its audio once stopped."""

    item_id: str
    taker: TurnTaker
    audio: np.ndarray | None = None  # float32 [n] at 16 kHz, set at speech_stopped
    tickets: dict[int, int] = field(default_factory=dict)  # pass id → the worker's ticket, while queued or running
    completed: TurnCompleted | None = None  # its transcript, held until every earlier turn's is out
    end: EndOfTurn | None = None  # its silence window from the end-of-turn model (turn_detection.model)
    lead: np.ndarray | None = None  # the audio of the turn this one reopened: it leads every pass and probe
    reopened: bool = False  # a later turn continues this one: it answers nothing and its item goes
    signals: PauseSignals = field(default_factory=PauseSignals)  # when its last pause's signals came

    @classmethod
    def start(cls, item_id: str, cfg: ServerVadConfig, start_ms: int, modelled: bool) -> SpokenTurn:
        """A turn the VAD just started, under ``cfg`` (``modelled``: the end-of-turn model sets its window)."""
        turn_cfg = TurnConfig(
            interval_ms=cfg.transcription_interval_ms,
            speculate=cfg.speculation_ms > 0,  # the VAD reports no pause as long as the window itself
            respond=cfg.create_response,
            eagerness=cfg.eagerness if cfg.semantic and not modelled else None,
            prepare_after_ms=cfg.speculation_ms,
            pause_text=modelled,
        )
        spoken = cls(item_id, TurnTaker(turn_cfg, start_ms))
        if modelled:
            spoken.end = EndOfTurn(windows_for(cfg.semantic, cfg.eagerness, cfg.silence_duration_ms))
        return spoken

    def joined(self, audio: np.ndarray) -> np.ndarray:
        """``audio`` of this turn, led by the audio of the turn it reopened (if it did)."""
        return audio if self.lead is None else np.concatenate([self.lead, audio])


def seconds_of(audio: np.ndarray | None) -> float:
    """Length of a turn's 16 kHz audio (the transcript's usage)."""
    return 0.0 if audio is None else len(audio) / TARGET_RATE


class ReplyPreparer(Protocol):
    """The engine side of speculation (``LiveSession``): prepare a reply unseen, or drop it."""

    def prepare(self, key: int, transcript: str) -> None: ...

    def drop(self, key: int) -> None: ...
