"""The shared Whisper pass queue (gateway.voice.asr_queue) on a fake clock, and how a turn takes a shed pass."""

from __future__ import annotations

import pytest

from gateway.voice.asr_queue import Pass, PassQueue, QueueConfig, Shed
from gateway.voice.turntaking import Transcribe, TurnCompleted, TurnConfig, TurnStopped, TurnTaker


def p(ticket: int, session: str, kind: str, at: float, input_s: float = 8.0) -> Pass:
    return Pass(ticket, session, kind, at, input_s)  # type: ignore[arg-type]


def test_a_gating_pass_runs_before_partials_that_came_first() -> None:
    q = PassQueue(QueueConfig(max_batch=1))
    q.submit(p(1, "a", "partial", 0.0))
    q.submit(p(2, "b", "partial", 0.01))
    q.submit(p(3, "c", "pause", 0.02))
    batch, shed = q.next_batch(0.03)
    assert batch is not None and [x.ticket for x in batch.passes] == [3]
    assert shed == []
    q.finished(0.1)
    batch, _ = q.next_batch(0.1)
    assert batch is not None and [x.ticket for x in batch.passes] == [1]  # then partials, oldest first


def test_gating_passes_of_several_sessions_share_one_call_partials_never_join_them() -> None:
    q = PassQueue(QueueConfig(max_batch=4))
    q.submit(p(1, "a", "partial", 0.0))
    for i, s in enumerate("bcdef"):
        q.submit(p(10 + i, s, "final" if i % 2 else "pause", 0.01 * i))
    batch, _ = q.next_batch(0.1)
    assert batch is not None
    assert [x.ticket for x in batch.passes] == [10, 11, 12, 13]  # up to max_batch, oldest first
    assert all(x.gating for x in batch.passes)
    assert q.next_batch(0.11) == (None, [])  # the worker is busy: nothing else starts
    q.finished(0.3)
    batch, _ = q.next_batch(0.3)
    assert batch is not None and [x.ticket for x in batch.passes] == [14]  # the last gating one, still alone


def test_a_partial_that_waited_too_long_is_shed_and_counted() -> None:
    q = PassQueue(QueueConfig(partial_max_wait_s=0.5))
    q.submit(p(1, "x", "final", 0.0))
    q.next_batch(0.0)
    q.submit(p(2, "a", "partial", 0.1))
    q.submit(p(3, "b", "partial", 0.5))
    q.finished(0.7)  # a long gating call: partial 2 is now 0.6 s old
    batch, shed = q.next_batch(0.7)
    assert shed == [Shed(2, "stale")]
    assert batch is not None and [x.ticket for x in batch.passes] == [3]
    assert q.stats.shed == 1


def test_gating_passes_are_never_shed_however_long_they_wait() -> None:
    q = PassQueue(QueueConfig(max_batch=1, partial_max_wait_s=0.1))
    q.submit(p(1, "a", "final", 0.0))
    q.submit(p(2, "b", "pause", 0.0))
    q.next_batch(0.0)
    q.finished(5.0)
    batch, shed = q.next_batch(5.0)
    assert shed == [] and batch is not None and batch.passes[0].ticket == 2
    assert q.stats.gating_wait_s == [0.0, 5.0]


def test_a_newer_partial_of_a_session_replaces_its_waiting_one() -> None:
    q = PassQueue()
    q.submit(p(1, "x", "final", 0.0))
    q.next_batch(0.0)
    assert q.submit(p(2, "a", "partial", 0.1)) == []
    assert q.submit(p(3, "a", "partial", 0.2)) == [Shed(2, "superseded")]
    assert q.submit(p(4, "b", "partial", 0.2)) == []  # another session's stays
    assert q.depth == 2


def test_partials_batch_only_within_the_budget_a_gating_pass_may_wait() -> None:
    # first guess 0.03 s per second of input: 2 s passes cost 0.06 s each in a call
    q = PassQueue(QueueConfig(max_batch=4, partial_budget_s=0.13, first_cost_s_per_s=0.03))
    for i in range(5):
        q.submit(p(i + 1, f"s{i}", "partial", 0.0, input_s=2.0))
    batch, _ = q.next_batch(0.0)
    assert batch is not None and [x.ticket for x in batch.passes] == [1, 2]  # 0.12 s; a third: 0.18 s
    q.finished(0.0)  # measured faster than guessed: the average moves toward it
    assert q.cost_s_per_s == pytest.approx(0.7 * 0.03)
    batch, _ = q.next_batch(0.0)
    assert batch is not None and [x.ticket for x in batch.passes] == [3, 4, 5]  # 3 x 2 s x 0.021 = 0.126 s


def test_one_partial_runs_even_over_the_budget() -> None:
    q = PassQueue(QueueConfig(partial_budget_s=0.01))
    q.submit(p(1, "a", "partial", 0.0, input_s=30.0))
    batch, _ = q.next_batch(0.0)
    assert batch is not None and len(batch.passes) == 1


def test_withdrawn_passes_never_run() -> None:
    q = PassQueue()
    q.submit(p(1, "a", "partial", 0.0))
    assert q.withdraw(1)
    assert not q.withdraw(1)
    assert q.next_batch(0.0) == (None, [])


def test_config_bounds() -> None:
    with pytest.raises(ValueError):
        QueueConfig(max_batch=0)
    with pytest.raises(ValueError):
        QueueConfig(partial_max_wait_s=-1)


# ---------------------------------------------------------------- the turn's side


def test_a_shed_partial_lets_the_pause_pass_it_blocked_start_at_once() -> None:
    t = TurnTaker(TurnConfig(interval_ms=500, prepare_after_ms=200), 0)
    (partial,) = t.heard(600)
    assert isinstance(partial, Transcribe) and partial.kind == "partial"
    assert t.blocked_on is None
    assert t.paused(1000, 900) == []  # the partial (up to 600 ms) does not cover the silence: the pause waits
    assert t.blocked_on == partial.pass_id
    (pause,) = t.shed(partial.pass_id)
    assert isinstance(pause, Transcribe) and pause.kind == "pause" and pause.upto_ms == 1000
    assert t.blocked_on is None
    assert t.shed(pause.pass_id) == []  # a gating pass is never taken as shed
    out = t.stopped(1400)
    assert isinstance(out[0], TurnStopped) and len(out) == 1
    (done,) = t.transcribed(pause.pass_id, "hello there")
    assert isinstance(done, TurnCompleted) and done.transcript == "hello there"


def test_a_final_pass_blocked_by_a_queued_partial_starts_when_it_is_shed() -> None:
    t = TurnTaker(TurnConfig(interval_ms=500, speculate=False), 0)
    (partial,) = t.heard(600)
    assert isinstance(partial, Transcribe)
    assert t.stopped(1200) == [TurnStopped(1200)]
    assert t.blocked_on == partial.pass_id
    (final,) = t.shed(partial.pass_id)
    assert isinstance(final, Transcribe) and final.kind == "final" and final.upto_ms == 1200
