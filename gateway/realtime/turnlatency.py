"""Where one turn's time went: VAD settle, transcription, queue, prefill, first token, first audio.

Pure: ``TurnTimer`` is fed the session's outbound events and two engine-side moments (the job
handed to the engine, its first text back) with a clock reading, and answers each finished
response with a frozen ``TurnLatency``; it reads no clock itself, so every ordering is a unit
test on a fake clock. ``response.done`` carries the record as ``response.metrics.turn_latency``
(an extension, like HF speech-to-speech's per-turn latency record) and the tracing adapter draws
its stage spans from the same marks, so the numbers a client shows and the trace agree.

The stages are measured where they happen and are not derived from one another, so their sum is
a check on the end-to-end time, not a restatement of it: the part no stage covers is the
hand-off of the first text from the engine thread to the event loop (a few ms on an idle loop).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# the outbound events that mark a stage boundary (every other event costs one set lookup)
_STOPPED = "input_audio_buffer.speech_stopped"
_STARTED = "input_audio_buffer.speech_started"
_TRANSCRIBED = "conversation.item.input_audio_transcription.completed"
_UNHEARD = "conversation.item.input_audio_transcription.failed"
_CREATED = "response.created"
_TEXT = "response.output_text.delta"
_PART = "response.content_part.added"  # the reply's first text opened its part (spoken replies have no text delta yet)
_AUDIO = "response.output_audio.delta"
_DONE = "response.done"
MARKED = frozenset({_STOPPED, _STARTED, _TRANSCRIBED, _UNHEARD, _CREATED, _TEXT, _PART, _AUDIO, _DONE})
_OPEN_TURNS = 16  # turns begun and not yet transcribed that are kept (a discarded "mm-hmm" is never transcribed)


@dataclass(frozen=True)
class TurnLatency:
    """One response's latency, in ms; a stage that did not happen (no voice, no audio out) is None."""

    vad_settle_ms: float | None  # end of speech (audio clock) → the VAD closing the turn: its silence window
    transcription_ms: float | None  # turn closed → its final transcript out
    queue_ms: float  # transcript (or response.created) → the engine starting the prompt: tokenizing, waiting
    prefill_ms: float | None  # the prompt through the model (None: the backend does not report it)
    first_token_ms: float | None  # prefill done → the first text out of the engine
    first_audio_ms: float | None  # the first text → its first audio chunk out (None: a text reply)
    end_to_end_ms: float  # end of speech (or response.created) → first audio (or first text), on one clock
    prepared: bool = False  # the reply was prepared during the user's pause: its model stages overlap the turn

    def wire(self) -> dict[str, Any]:
        """The ``response.metrics.turn_latency`` object."""
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class ResponseMarks:
    """Clock readings (seconds) of one response's stage boundaries, as they happen."""

    created_at: float
    spoken: VoiceMarks | None = None  # the user turn it answers, when it answers one
    submitted_at: float | None = None  # the job handed to the engine (before created_at when prepared)
    first_text_at: float | None = None  # the engine's first text reached the session
    first_audio_at: float | None = None  # its first audio delta went out
    done_at: float | None = None
    prepared: bool = False


@dataclass
class VoiceMarks:
    """One spoken user turn's boundaries."""

    item_id: str
    started_at: float | None = None  # speech_started went out
    stopped_at: float | None = None  # speech_stopped went out
    settle_ms: float | None = None  # audio from the end of speech to where the VAD had analysed when it closed the turn
    transcribed_at: float | None = None  # its transcript went out (or its transcription failed)
    failed: bool = False  # transcription failed
    passes: list[tuple[str, float, float]] = field(default_factory=list)  # Whisper passes: (kind, start, end)


class TurnTimer:
    """Per-session marks: fed events as they go out (``observe``) and engine moments; ``finish``
    pops a response's marks into a ``TurnLatency``. Keeps only the turns not yet answered.

    A user turn no response answers (its transcription failed, or the next turn was transcribed
    before any response claimed it: a transcription session, ``create_response: false``) is handed
    out once by ``take_unanswered``, so a trace can draw it on its own."""

    def __init__(self) -> None:
        self.responses: dict[str, ResponseMarks] = {}
        self.turns: dict[str, VoiceMarks] = {}  # item id → a user turn being spoken or transcribed
        self._answered: VoiceMarks | None = None  # the latest transcribed turn no response claimed yet
        self._unanswered: list[VoiceMarks] = []

    def observe(
        self, events: list[dict[str, Any]], now: float, audio_now_ms: int | None = None, silence_ms: int = 0
    ) -> None:
        """Events just sent; ``audio_now_ms``: how far the VAD has analysed the input (its clock);
        ``silence_ms``: the silence that ends a turn (``speech_stopped``'s ``audio_end_ms`` includes it)."""
        for ev in events:
            kind = ev.get("type")
            if kind not in MARKED:
                continue
            if kind in (_TEXT, _PART):
                self.first_text(ev.get("response_id", ""), now)
            elif kind == _AUDIO:
                r = self.responses.get(ev.get("response_id", ""))
                if r is not None and r.first_audio_at is None:
                    r.first_audio_at = now
            elif kind == _STARTED:
                self.turns[ev["item_id"]] = VoiceMarks(ev["item_id"], started_at=now)
                if len(self.turns) > _OPEN_TURNS:  # the oldest never ended (dicts keep insertion order)
                    del self.turns[next(iter(self.turns))]
            elif kind == _STOPPED:
                t = self.turns.setdefault(ev["item_id"], VoiceMarks(ev["item_id"]))
                t.stopped_at = now
                if audio_now_ms is not None:
                    t.settle_ms = float(max(audio_now_ms - int(ev.get("audio_end_ms", audio_now_ms)), 0) + silence_ms)
            elif kind == _TRANSCRIBED:
                t = self._ended(ev["item_id"], now)
                if self._answered is not None:  # no response claimed the one before: it stays unanswered
                    self._unanswered.append(self._answered)
                self._answered = t
            elif kind == _UNHEARD:
                t = self._ended(ev["item_id"], now)
                t.failed = True
                self._unanswered.append(t)
            elif kind == _CREATED:
                rid = ev["response"]["id"]
                self.responses[rid] = ResponseMarks(now, spoken=self._answered)
                self._answered = None
            elif kind == _DONE:
                r = self.responses.get(ev["response"]["id"])
                if r is not None:
                    r.done_at = now

    def _ended(self, item_id: str, now: float) -> VoiceMarks:
        """``item_id``'s turn leaves the open ones: its transcription ended (or failed) ``now``."""
        t = self.turns.pop(item_id, None) or VoiceMarks(item_id)
        t.transcribed_at = now
        return t

    def whisper_pass(self, item_id: str, kind: str, start: float, end: float) -> None:
        """A Whisper pass over ``item_id``'s audio ran from ``start`` to ``end`` (queued → text)."""
        t = self.turns.get(item_id)
        if t is not None:
            t.passes.append((kind, start, end))

    def submitted(self, response_id: str, now: float) -> None:
        """``response_id``'s job was handed to the engine."""
        r = self.responses.get(response_id)
        if r is not None:
            r.submitted_at = now

    def adopted(self, response_id: str, submitted_at: float) -> None:
        """A reply prepared unseen (its job submitted at ``submitted_at``) became ``response_id``."""
        r = self.responses.get(response_id)
        if r is not None:
            r.submitted_at, r.prepared = submitted_at, True

    def first_text(self, response_id: str, now: float) -> None:
        """The engine's first text of ``response_id`` reached the session (spoken or shown)."""
        r = self.responses.get(response_id)
        if r is not None and r.first_text_at is None:
            r.first_text_at = now

    def finish(
        self, response_id: str, metrics: dict[str, Any] | None
    ) -> tuple[ResponseMarks, TurnLatency | None] | None:
        """``response_id`` ends: its marks and latency (None when it produced no text: a tool call alone,
        cancelled before it spoke), or None for a response never seen created."""
        r = self.responses.pop(response_id, None)
        if r is None:
            return None
        return r, latency(r, metrics or {})

    def take_unanswered(self) -> list[VoiceMarks]:
        """The user turns found unanswered since the last call (each once)."""
        out, self._unanswered = self._unanswered, []
        return out

    def pending(self) -> list[VoiceMarks]:
        """Turns still open or unanswered (the session is closing): begun, transcribed or not."""
        out = [*self._unanswered, *([self._answered] if self._answered is not None else []), *self.turns.values()]
        self._unanswered, self._answered, self.turns = [], None, {}
        return out


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else (b - a) * 1000


def latency(r: ResponseMarks, m: dict[str, Any]) -> TurnLatency | None:
    """The record of a response's marks and its job's metrics (``queue_ms``, ``prefill_ms`` and
    ``ttft_ms`` measured by the job on the engine's clock; durations only, so clocks need not agree)."""
    if r.first_text_at is None:
        return None
    spoken = r.spoken
    stopped = spoken.stopped_at if spoken is not None else None
    transcribed = spoken.transcribed_at if spoken is not None else None
    voice = stopped is not None and transcribed is not None
    settle = spoken.settle_ms if voice and spoken is not None else None
    origin = transcribed if voice and transcribed is not None else r.created_at  # what the reply waited from
    engine_queue = float(m.get("queue_ms") or 0.0)
    prefill = m.get("prefill_ms")
    ttft = m.get("ttft_ms")
    submitted = r.submitted_at if r.submitted_at is not None else origin
    first_token = None if ttft is None else max(float(ttft) - engine_queue - float(prefill or 0.0), 0.0)
    end = r.first_audio_at if r.first_audio_at is not None else r.first_text_at
    if voice and stopped is not None:
        e2e = (end - stopped) * 1000 + (settle or 0.0)
    else:
        e2e = (end - r.created_at) * 1000
    return TurnLatency(
        vad_settle_ms=settle,
        transcription_ms=_ms(stopped, transcribed) if voice else None,
        queue_ms=max((submitted - origin) * 1000, 0.0) + engine_queue,
        prefill_ms=None if prefill is None else float(prefill),
        first_token_ms=first_token,
        first_audio_ms=_ms(r.first_text_at, r.first_audio_at),
        end_to_end_ms=e2e,
        prepared=r.prepared,
    )


def stage_sum(t: TurnLatency) -> float:
    """The stages added up (what ``end_to_end_ms`` is checked against)."""
    parts = (t.vad_settle_ms, t.transcription_ms, t.queue_ms, t.prefill_ms, t.first_token_ms, t.first_audio_ms)
    return sum(p for p in parts if p is not None)
