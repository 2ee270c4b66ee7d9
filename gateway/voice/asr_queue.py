"""Whisper passes of every voice session in one queue: the pass that gates a reply first, partials shed under load.

Sans-I/O. The voice layer submits passes (each session's ``TurnTaker`` asks for them), the ASR
worker asks for the next batch when it is free and reports when a batch is done; the queue
answers which passes run together and which partial passes are shed. It reads no clock (every
call takes ``now``, in seconds) and starts no thread, so every interleaving of sessions is a
fake-clock unit test (``tests/realtime/test_asr_queue.py``).

Why: a Whisper pass on a 2-core CPU takes about as long as the silence window leaves for it, so
with one lock per session four speakers waited behind each other's passes (end of speech → first
text 2.6 s at four speakers, 0.6 s at one). The policy:

- **A gating pass goes first.** The pause pass (speculation) and the final pass decide when a
  reply can start; they run before any partial pass that is waiting, oldest first.
- **Several passes share one call.** Up to ``max_batch`` passes are encoded and decoded together
  (CTranslate2 takes a batch: one decoder step for all of them, which on a CPU costs little more
  than one). Gating passes are never held back to make a batch bigger: a batch is whatever waits
  when the worker comes free.
- **Partials are shed, never a reply late.** A partial pass only shows words early. One that
  waited longer than ``partial_max_wait_s`` is dropped (the session's next one hears more audio),
  and partials only start while no gating pass waits, at most as many as the worker can run
  within ``partial_budget_s`` (so a gating pass that arrives meanwhile waits at most that long).
  A session's newer partial replaces its older queued one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

PassKind = Literal["partial", "pause", "final"]


@dataclass(frozen=True)
class QueueConfig:
    max_batch: int = 4  # passes that share one encoder/decoder call
    partial_max_wait_s: float = 0.5  # a partial waiting longer than this is shed (about one interval)
    partial_budget_s: float = 0.25  # most estimated run time of a batch of partials (a gating pass's worst wait)
    first_cost_s_per_s: float = 0.03  # run time per second of encoder input, until one batch is measured

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be ≥ 1, got {self.max_batch}")
        if self.partial_max_wait_s < 0 or self.partial_budget_s < 0 or self.first_cost_s_per_s <= 0:
            raise ValueError("partial_max_wait_s and partial_budget_s must be ≥ 0, first_cost_s_per_s > 0")


@dataclass(frozen=True)
class Pass:
    """One Whisper pass a session asked for."""

    ticket: int  # unique per queue (the shell's counter)
    session: str  # who asked (one partial per session waits at a time)
    kind: PassKind
    queued_at: float  # clock seconds
    input_s: float  # seconds of encoder input (Whisper's 30 s, or the clip plus headroom)

    @property
    def gating(self) -> bool:
        """A reply waits on this pass (pause or final), or only early words do (partial)."""
        return self.kind != "partial"


@dataclass(frozen=True)
class Batch:
    """Passes to run in one call, gating ones first."""

    passes: tuple[Pass, ...]
    started_at: float

    @property
    def input_s(self) -> float:
        """Encoder input of the whole call: every pass padded to the longest."""
        return len(self.passes) * max(p.input_s for p in self.passes)


@dataclass(frozen=True)
class Shed:
    """This partial pass will not run: tell its session (its turn asks for a fresher one)."""

    ticket: int
    reason: Literal["stale", "superseded"]


@dataclass
class QueueStats:
    """Counters for /metrics and the bench (the shell reads them; the queue only adds)."""

    shed: int = 0  # partial passes dropped
    batches: int = 0
    passes: int = 0
    gating_wait_s: list[float] = field(default_factory=list)  # per gating pass: queued → started (recent)
    KEEP = 256  # wait samples kept


class PassQueue:
    def __init__(self, config: QueueConfig | None = None):
        self.config = config or QueueConfig()
        self._waiting: dict[int, Pass] = {}  # ticket → pass, insertion (= arrival) order
        self.running: Batch | None = None
        self.cost_s_per_s = self.config.first_cost_s_per_s  # measured: run seconds per second of input
        self.stats = QueueStats()

    # ------------------------------------------------------------------ inputs

    def submit(self, p: Pass) -> list[Shed]:
        """A session wants a pass. A partial replaces the session's partial still waiting."""
        out: list[Shed] = []
        if not p.gating:
            for old in [w for w in self._waiting.values() if w.session == p.session and not w.gating]:
                del self._waiting[old.ticket]
                out.append(self._shed(old, "superseded"))
        self._waiting[p.ticket] = p
        return out

    def withdraw(self, ticket: int) -> bool:
        """The session no longer needs pass ``ticket``: True if it had not started (it never will)."""
        return self._waiting.pop(ticket, None) is not None

    def next_batch(self, now: float) -> tuple[Batch | None, list[Shed]]:
        """The worker is free: what runs now (None: nothing), and which partials were shed."""
        if self.running is not None:
            return None, []
        shed = [
            self._shed(self._waiting.pop(p.ticket), "stale")
            for p in list(self._waiting.values())
            if not p.gating and now - p.queued_at > self.config.partial_max_wait_s
        ]
        gating = [p for p in self._waiting.values() if p.gating]
        if gating:
            chosen = gating[: self.config.max_batch]
        else:
            chosen = self._partials_within_budget(self._waiting.values())
        if not chosen:
            return None, shed
        for p in chosen:
            del self._waiting[p.ticket]
            if p.gating:
                self.stats.gating_wait_s.append(now - p.queued_at)
        del self.stats.gating_wait_s[: -QueueStats.KEEP]
        self.running = Batch(tuple(chosen), now)
        return self.running, shed

    def finished(self, now: float) -> None:
        """The running batch is done (its texts are the shell's to deliver)."""
        batch, self.running = self.running, None
        if batch is None:
            return
        run = max(now - batch.started_at, 0.0)
        if batch.input_s > 0:  # an average of the last few batches: the box's load changes
            self.cost_s_per_s = 0.7 * self.cost_s_per_s + 0.3 * run / batch.input_s
        self.stats.batches += 1
        self.stats.passes += len(batch.passes)

    # ------------------------------------------------------------------ views

    @property
    def depth(self) -> int:
        """Passes waiting (not running)."""
        return len(self._waiting)

    def estimate_s(self, passes: Iterable[Pass]) -> float:
        """Estimated run time of one call over ``passes``."""
        ps = list(passes)
        return self.cost_s_per_s * len(ps) * max((p.input_s for p in ps), default=0.0)

    # ------------------------------------------------------------------ internals

    def _partials_within_budget(self, waiting: Iterable[Pass]) -> list[Pass]:
        chosen: list[Pass] = []
        for p in waiting:  # oldest first
            if len(chosen) == self.config.max_batch:
                break
            if chosen and self.estimate_s([*chosen, p]) > self.config.partial_budget_s:
                break
            chosen.append(p)  # the first always: a partial that never runs shows nothing, ever
        return chosen

    def _shed(self, p: Pass, reason: Literal["stale", "superseded"]) -> Shed:
        self.stats.shed += 1
        return Shed(p.ticket, reason)
