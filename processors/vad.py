"""Server VAD: 16 kHz audio in, ``speech_started`` / ``speech_stopped`` and the turn's audio out.

Three layers, each testable alone:

- ``VadStateMachine`` — pure: one speech probability per 32 ms window in, events out, with the
  OpenAI Realtime ``server_vad`` semantics (``threshold``, ``prefix_padding_ms``,
  ``silence_duration_ms``). No numpy, no model: unit-tested with made-up probabilities.
- ``SileroVad`` — the silero-vad ONNX model shipped inside the ``silero-vad`` wheel, run on
  onnxruntime alone (no torch, no hub). One instance per audio stream (it is recurrent); the
  ``InferenceSession`` is loaded once per process and shared.
- ``ServerVad`` — the streaming segmenter: takes frames of any size (e.g. 20–100 ms), windows
  them, asks the model, drives the state machine, and keeps just enough audio to hand back each
  finished turn including its prefix padding.

Milliseconds count from the first sample ever fed (the session clock). ``audio_start_ms`` already
includes the prefix padding and ``audio_end_ms`` the trailing silence, as OpenAI documents them.

Shapes: a window is float32 ``[512]`` at 16 kHz; the model's input is ``[1, 64 + 512]`` (the
previous window's last 64 samples, then the window), its state ``[2, 1, 128]``, its output ``[1, 1]``.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .audio import TARGET_RATE, AudioError

WINDOW = 512  # samples per model window at 16 kHz
WINDOW_MS = WINDOW * 1000 // TARGET_RATE  # 32 ms, exact
CONTEXT = 64  # samples of the previous window the model sees in front of each window
HYSTERESIS = 0.15  # once speaking, a window is silence only below threshold - 0.15 (Silero's rule)
NOISE_GATE_DB = 10.0  # a window is speech only this far above the noise floor (babble at 10 dB SNR: bench'd)
FLOOR_WINDOWS = 156  # the noise floor is a low percentile of the last ~5 s of window energies
FLOOR_PERCENTILE = 10
SMOOTH_WINDOWS = 3  # window energy is averaged over ~96 ms, as a syllable lasts
# A window quieter than this is silence whatever the model says: no microphone's noise floor is this
# low, but digital silence (a muted track, a pause in synthetic speech) and a codec's fade-out are.
# silero-vad's recurrent state kept its probability up for 2–3 windows after such a fade (speech
# through Opus ended its turns 32–96 ms later than the same speech as pcm16). The model still runs on
# it: skipping it (or resetting its state) made it 30–100 ms slower to hear the next onset.
SILENCE_DBFS = -70.0
# A pause (speculation on) is reported after this much silence, or speculation_ms if shorter: the
# transcription of the turn so far starts then, the reply only at speculation_ms (gateway.realtime.
# turntaking). At 200 ms a 0.5 s Whisper pass could not finish inside the 500 ms window (bench voice).
PAUSE_PASS_MS = 64


# ---------------------------------------------------------------- config


EAGERNESS = ("low", "medium", "high", "auto")
# semantic_vad: eagerness → the silence window before the partial transcript is known ("auto" is "medium")
EAGERNESS_SILENCE_MS = {"low": 1000, "medium": 500, "high": 250, "auto": 500}
TURN_MODELS = ("smart_turn", "none")  # turn_detection.model: the end-of-turn model (processors.smart_turn)
BACKCHANNEL_MS = 700  # semantic_vad's default backchannel_ms (processors.backchannel.MAX_MS)


@dataclass(frozen=True)
class ServerVadConfig:
    """``session.audio.input.turn_detection`` (OpenAI's fields and defaults, plus two extensions)."""

    threshold: float = 0.5  # speech probability (0..1) at which a turn starts
    prefix_padding_ms: int = 300  # audio kept before the detected start, part of the turn
    silence_duration_ms: int = 500  # silence that ends a turn (included in the turn's audio)
    create_response: bool = True  # the gateway answers each committed turn by itself
    interrupt_response: bool = True  # speech start cancels the response in progress
    type: str = "server_vad"  # "server_vad" | "semantic_vad" (silence window adapts to the partial transcript)
    eagerness: str = "auto"  # semantic_vad only: low | medium | high | auto → EAGERNESS_SILENCE_MS
    speculation_ms: int = 200  # extension: silence after which the reply is prepared unseen (0: off)
    transcription_interval_ms: int = 500  # extension: a partial transcript per this much new speech (0: off)
    idle_timeout_ms: int | None = None  # silence after a response.done that prompts a response (GA: 5..30 s)
    model: str = "none"  # extension: "smart_turn" ends the turn by the end-of-turn model (semantic_vad's default)
    backchannel_ms: int = 0  # extension: shorter acknowledgements over a reply keep it going (0: any speech cuts)
    reopen_ms: int = 0  # extension: speech this soon after a turn ended, its reply unheard, continues it (0: off)

    @property
    def neg_threshold(self) -> float:
        """Below this a window counts as silence while speaking."""
        return max(self.threshold - HYSTERESIS, 0.01)

    @property
    def semantic(self) -> bool:
        return self.type == "semantic_vad"

    def view(self) -> dict[str, Any]:
        """The wire object reported in ``session.created`` / ``session.updated``."""
        common = {
            "create_response": self.create_response,
            "interrupt_response": self.interrupt_response,
            "speculation_ms": self.speculation_ms,
            "transcription_interval_ms": self.transcription_interval_ms,
            "model": self.model,
            "backchannel_ms": self.backchannel_ms,
            "reopen_ms": self.reopen_ms,
        }
        if self.idle_timeout_ms is not None:
            common["idle_timeout_ms"] = self.idle_timeout_ms
        if self.semantic:
            return {"type": self.type, "eagerness": self.eagerness, **common}
        return {
            "type": self.type,
            "threshold": self.threshold,
            "prefix_padding_ms": self.prefix_padding_ms,
            "silence_duration_ms": self.silence_duration_ms,
            **common,
        }

    @classmethod
    def from_turn_detection(cls, raw: dict[str, Any]) -> ServerVadConfig:
        """Validate a wire ``turn_detection`` object. Bad values raise ``AudioError("invalid_value")``."""
        kind = raw.get("type", "server_vad")
        if kind not in ("server_vad", "semantic_vad"):
            raise AudioError("invalid_value", f"turn_detection.type {kind!r} is not supported")
        ext = {
            "create_response": _flag(raw, "create_response", True),
            "interrupt_response": _flag(raw, "interrupt_response", True),
            "speculation_ms": _number(raw, "speculation_ms", 200, 0, 10_000, int),
            "transcription_interval_ms": _number(raw, "transcription_interval_ms", 500, 0, 60_000, int),
            "idle_timeout_ms": _number(raw, "idle_timeout_ms", None, 5_000, 30_000, int),
            "reopen_ms": _number(raw, "reopen_ms", 0, 0, 10_000, int),
        }
        semantic = kind == "semantic_vad"
        model = raw.get("model") or ("smart_turn" if semantic else "none")
        if model not in TURN_MODELS:
            raise AudioError("invalid_value", f"turn_detection.model must be smart_turn or none, got {model!r}")
        ext["model"] = model
        ext["backchannel_ms"] = _number(raw, "backchannel_ms", BACKCHANNEL_MS if semantic else 0, 0, 5_000, int)
        if semantic:
            eagerness = raw.get("eagerness") or "auto"
            if eagerness not in EAGERNESS:
                raise AudioError(
                    "invalid_value",
                    f"turn_detection.eagerness must be one of {', '.join(EAGERNESS)}, got {eagerness!r}",
                )
            silence = EAGERNESS_SILENCE_MS[eagerness]
            return cls(silence_duration_ms=silence, type=kind, eagerness=eagerness, **ext)
        return cls(
            threshold=_number(raw, "threshold", 0.5, 0.0, 1.0, float),
            prefix_padding_ms=_number(raw, "prefix_padding_ms", 300, 0, 10_000, int),
            silence_duration_ms=_number(raw, "silence_duration_ms", 500, 0, 10_000, int),
            **ext,
        )


def _number(raw: dict[str, Any], key: str, default: Any, lo: float, hi: float, kind: type) -> Any:
    value = raw.get(key)
    if value is None:
        return default
    ok_type = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        ok_type = ok_type and float(value).is_integer()
    if not ok_type or not lo <= value <= hi:
        raise AudioError("invalid_value", f"turn_detection.{key} must be a number in {lo}..{hi}, got {value!r}")
    return kind(value)


def _flag(raw: dict[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise AudioError("invalid_value", f"turn_detection.{key} must be a boolean, got {value!r}")
    return value


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class SpeechStarted:
    """``input_audio_buffer.speech_started``: the turn's audio begins at ``audio_start_ms``."""

    audio_start_ms: int


@dataclass(frozen=True, eq=False)
class SpeechStopped:
    """``input_audio_buffer.speech_stopped``: the turn spans ``audio_start_ms``..``audio_end_ms``.

    ``audio`` (float32 ``[(audio_end_ms - audio_start_ms) * 16]``) is filled in by ``ServerVad``;
    the pure state machine leaves it ``None``.
    """

    audio_start_ms: int
    audio_end_ms: int
    audio: np.ndarray | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SpeechPaused:
    """Internal (never sent): silence has lasted ``pause_ms`` inside a turn, from ``silence_start_ms``."""

    silence_start_ms: int


@dataclass(frozen=True)
class SpeechResumed:
    """Internal: speech came back after a ``SpeechPaused``, before the silence window closed."""

    at_ms: int


VadEvent = SpeechStarted | SpeechStopped | SpeechPaused | SpeechResumed


# ---------------------------------------------------------------- the pure state machine


class VadStateMachine:
    """Per-window speech probabilities → ``SpeechStarted`` / ``SpeechStopped``. Pure logic.

    Window ``k`` covers ``[k * window_ms, (k + 1) * window_ms)``. A turn starts at the first
    window whose probability reaches ``threshold``; its audio begins ``prefix_padding_ms``
    earlier, but never before the end of the previous turn (or a reset). It stops once the
    probability has stayed below ``neg_threshold`` for ``silence_duration_ms`` (windows between the
    two thresholds neither start nor reset the silence count); ``audio_end_ms`` is that moment.

    With ``pauses``, it also says ``SpeechPaused`` once the silence reaches ``pause_ms``
    (if that is shorter than the window) and ``SpeechResumed`` if speech returns after that.
    ``silence_target_ms`` overrides ``silence_duration_ms`` for the current turn (semantic_vad).
    """

    def __init__(self, config: ServerVadConfig | None = None, window_ms: int = WINDOW_MS, pauses: bool = False):
        self.config = config or ServerVadConfig()
        self.window_ms = window_ms
        self.pauses = pauses
        self.silence_target_ms: int | None = None  # this turn's silence window, when not the config's
        self.ended_silence_ms = 0  # the silence the latest turn ended after (its window, or more if it shrank late)
        self._paused = False
        self.now_ms = 0  # end of the last window seen
        self.in_speech = False
        self.turn_start_ms = 0  # audio_start_ms of the current turn (valid while in_speech)
        self._floor_ms = 0  # audio before this belongs to an earlier turn or was dropped
        self._silence_ms: int | None = None  # None: not counting silence

    def step(self, prob: float) -> VadEvent | None:
        """Advance one window with speech probability ``prob``; return the event it causes, if any."""
        cfg = self.config
        window_start = self.now_ms
        self.now_ms += self.window_ms
        if not self.in_speech:
            if prob >= cfg.threshold:
                self.in_speech = True
                self._silence_ms = None
                self.turn_start_ms = max(self._floor_ms, window_start - cfg.prefix_padding_ms)
                return SpeechStarted(self.turn_start_ms)
            return None
        if prob >= cfg.threshold:
            self._silence_ms = None
            if self._paused:
                self._paused = False
                return SpeechResumed(window_start)
        elif prob < cfg.neg_threshold and self._silence_ms is None:
            self._silence_ms = 0
        if self._silence_ms is not None:
            self._silence_ms += self.window_ms
            if self._silence_ms >= self.silence_window_ms:
                self._end_turn()
                return SpeechStopped(self.turn_start_ms, self.now_ms)
            if self.pauses and not self._paused and 0 < self.pause_ms <= self._silence_ms:
                self._paused = True
                return SpeechPaused(self.now_ms - self._silence_ms)
        return None

    @property
    def pause_ms(self) -> int:
        """Silence after which a pause is reported: ``speculation_ms``, at most ``PAUSE_PASS_MS`` (0: none)."""
        return min(self.config.speculation_ms, PAUSE_PASS_MS)

    @property
    def silence_window_ms(self) -> int:
        """The silence that ends the current turn."""
        return self.config.silence_duration_ms if self.silence_target_ms is None else self.silence_target_ms

    def _end_turn(self) -> None:
        self.ended_silence_ms = self._silence_ms or 0  # read once the turn is gone (its latency record)
        self.in_speech = False
        self._silence_ms = None
        self._paused = False
        self.silence_target_ms = None
        self._floor_ms = self.now_ms

    def reset(self) -> None:
        """Drop the turn in progress (manual commit/clear); audio so far belongs to no later turn."""
        self._end_turn()


# ---------------------------------------------------------------- the model


class SpeechProbModel(Protocol):
    """A recurrent per-window speech detector (``SileroVad``, or a fake in tests)."""

    def __call__(self, window: np.ndarray) -> float:
        """float32 ``[512]`` at 16 kHz → speech probability in [0, 1]."""
        ...

    def reset(self) -> None:
        """Forget the stream so far."""
        ...


class VadLoadError(RuntimeError):
    """The silero-vad ONNX model cannot be found or loaded."""


def silero_onnx_path() -> Path:
    """``silero_vad/data/silero_vad.onnx`` inside the installed wheel (located without importing it)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise VadLoadError("silero-vad is not installed (pip install silero-vad==6.2.3)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise VadLoadError(f"silero-vad is installed but {path} is missing")
    return path


@functools.lru_cache(maxsize=1)
def _session() -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # one 32 ms window is tiny; threads only add overhead
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(silero_onnx_path()), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise VadLoadError(f"could not load the silero-vad ONNX model: {exc}") from exc


class SileroVad:
    """One stream's silero-vad: call it on consecutive 512-sample windows (16 kHz)."""

    def __init__(self) -> None:
        self._session = _session()
        self._sr = np.array(TARGET_RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)

    def __call__(self, window: np.ndarray) -> float:
        if window.shape != (WINDOW,):
            raise ValueError(f"silero-vad takes windows of shape ({WINDOW},), got {window.shape}")
        x = np.concatenate([self._context, window.astype(np.float32, copy=False)])[None, :]
        out, self._state = self._session.run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._context = x[0, -CONTEXT:]
        return float(out[0, 0])


# ---------------------------------------------------------------- the noise gate


class NoiseGate:
    """Speech above the background, not any speech: silero-vad rightly hears babble (other people
    talking) as speech, so on its own a café turns into an endless turn. A window's probability
    counts only when its energy (averaged over ``SMOOTH_WINDOWS``) is ``margin_db`` above the noise
    floor, the ``FLOOR_PERCENTILE``-th percentile of the last ``FLOOR_WINDOWS`` window energies. In
    a quiet room the floor is near silence and nothing changes; in steady noise the user must be
    louder than it (10 dB SNR passes, as the tests check). Runs once per 32 ms window of every
    listening session, on the event loop: plain Python over a few floats (numpy's percentile took as
    long as the model).
    """

    def __init__(self, margin_db: float = NOISE_GATE_DB):
        self.margin_db = margin_db
        self._energy_db: deque[float] = deque(maxlen=FLOOR_WINDOWS)  # the last window energies, oldest first
        self._power: deque[float] = deque(maxlen=SMOOTH_WINDOWS)  # the last mean powers

    def __call__(self, window: np.ndarray, prob: float, power: float | None = None) -> float:
        """The probability to act on: ``prob``, or 0 for a window that does not stand out.
        ``power``: the window's mean power, where the caller has it already."""
        power = window_power(window) if power is None else power
        self._power.append(power)
        self._energy_db.append(_db(power))
        floor = percentile(self._energy_db, FLOOR_PERCENTILE)
        return prob if _db(sum(self._power) / len(self._power)) >= floor + self.margin_db else 0.0


def window_power(window: np.ndarray) -> float:
    """Mean power of float32 ``[n]`` samples (full scale 1.0)."""
    return float(np.mean(np.square(window, dtype=np.float64)))


def percentile(values: Iterable[float], q: float) -> float:
    """numpy's default (linear) percentile, on a few hundred floats without numpy's overhead."""
    ordered = sorted(values)
    pos = q / 100.0 * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _db(power: float) -> float:
    return 10.0 * math.log10(power + 1e-10)


# ---------------------------------------------------------------- the streaming segmenter


class ServerVad:
    """Frames of 16 kHz float32 audio in (any size) → VAD events, each finished turn with its audio.

    Audio outside a turn is kept only as far back as the prefix padding needs; inside a turn it is
    all kept until ``SpeechStopped`` hands it back. Not thread-safe: one per session.
    """

    def __init__(
        self,
        config: ServerVadConfig | None = None,
        model: SpeechProbModel | None = None,
        pauses: bool = False,
        noise_gate_db: float | None = NOISE_GATE_DB,
    ):
        self.machine = VadStateMachine(config, pauses=pauses)
        self.gate = NoiseGate(noise_gate_db) if noise_gate_db is not None else None
        self.model = model if model is not None else SileroVad()
        self._pending = np.zeros(0, dtype=np.float32)  # < WINDOW samples not yet windowed
        self._chunks: list[np.ndarray] = []  # windows kept, oldest first
        self._kept_from = 0  # absolute sample index of self._chunks[0][0]

    @property
    def config(self) -> ServerVadConfig:
        return self.machine.config

    @property
    def in_speech(self) -> bool:
        return self.machine.in_speech

    @property
    def now_ms(self) -> int:
        """Session-clock ms of the audio analysed so far (a partial window is not yet counted)."""
        return self.machine.now_ms

    def update(self, config: ServerVadConfig) -> None:
        """New settings (``session.update``); a turn in progress is dropped."""
        self.reset()
        self.machine.config = config

    def feed(self, audio: np.ndarray) -> list[VadEvent]:
        """Analyse float32 ``[n]`` at 16 kHz; return the events it completes, in order."""
        audio = np.array(audio, dtype=np.float32).reshape(-1)  # a copy: kept windows must not alias
        buf = np.concatenate([self._pending, audio]) if self._pending.size else audio
        n_windows = buf.size // WINDOW
        events: list[VadEvent] = []
        for k in range(n_windows):
            window = buf[k * WINDOW : (k + 1) * WINDOW]
            self._chunks.append(window)
            power = window_power(window)
            prob = self.model(window)  # run on silence too: its state after silence hears the next onset sooner
            if _db(power) < SILENCE_DBFS:
                prob = 0.0
            event = self.machine.step(self.gate(window, prob, power) if self.gate is not None else prob)
            if isinstance(event, SpeechStopped):
                event = replace(event, audio=self._take(event.audio_start_ms, event.audio_end_ms))
            if event is not None:
                events.append(event)
            if not self.machine.in_speech:
                self._trim()
        self._pending = buf[n_windows * WINDOW :].copy()
        return events

    def turn_audio(self) -> np.ndarray:
        """float32 ``[n]``: the current turn's audio so far (empty outside a turn), for partial transcripts."""
        if not self.machine.in_speech:
            return np.zeros(0, dtype=np.float32)
        return self._take(self.machine.turn_start_ms, self.machine.now_ms)

    def reset(self) -> None:
        """Drop the turn in progress (manual commit/clear). The model keeps its stream state."""
        self.machine.reset()
        self._trim()

    def _take(self, start_ms: int, end_ms: int) -> np.ndarray:
        kept = np.concatenate(self._chunks)
        lo = start_ms * TARGET_RATE // 1000 - self._kept_from
        hi = end_ms * TARGET_RATE // 1000 - self._kept_from
        return kept[max(lo, 0) : hi].copy()

    def _trim(self) -> None:
        """Outside a turn, keep only the windows the next turn's prefix padding could reach."""
        keep_from = (self.machine.now_ms - self.config.prefix_padding_ms) * TARGET_RATE // 1000 - WINDOW
        while self._chunks and self._kept_from + self._chunks[0].size <= keep_from:
            self._kept_from += self._chunks.pop(0).size
