"""DecodeJob's per-token report (``JobEvents.tokens`` / ``.logprobs``): aligned with what it generated,
scored like a fresh forward, alternatives best first, the same with drafting as without."""

from __future__ import annotations

import numpy as np
import pytest

from models.decode import DecodeJob, JobEvents
from models.sampling import SamplingParams, log_softmax
from models.scheduler import SchedulerConfig
from models.verify import DraftVerify, FixedLookahead
from tests.engine.spec_fakes import FakeLM, ListDrafter, oracle_drafts


def run(backend, prompt, params, top, drafter=None) -> tuple[DecodeJob, list[JobEvents]]:
    sched = SchedulerConfig(lookahead_tokens=8 if drafter else 0, draft_before_first_text=True)
    spec = DraftVerify(drafter, FixedLookahead(4)) if drafter else None
    job = DecodeJob(backend, backend.new_state(), prompt, params, sched, spec, spec, top_logprobs=top)
    events = []
    while not job.finished:
        events.append(job.step())
    return job, events


def reference(backend, prompt, generated) -> list[np.ndarray]:
    rows = backend.forward(backend.new_state(), prompt + generated[:-1], n_logits=len(generated))
    return [log_softmax(r) for r in rows]  # [V] per generated token


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_each_token_has_its_logprob_and_the_top_alternatives(temperature):
    backend = FakeLM(vocab=12, eos=11)
    prompt = [1, 2, 3]
    job, events = run(backend, prompt, SamplingParams(temperature=temperature, seed=7, max_tokens=30), 3)
    got = [lp for ev in events for lp in ev.logprobs]
    assert [t for ev in events for t in ev.tokens] == job.generated
    assert len(got) == len(job.generated) > 0
    ref = reference(backend, prompt, job.generated)
    for g, tok, row in zip(got, job.generated, ref, strict=True):
        assert g.text == backend.decode([tok])
        assert g.logprob == pytest.approx(float(row[tok]), abs=1e-5)
        best = np.argsort(-row, kind="stable")[:3]
        assert [t for t, _ in g.top] == [backend.decode([int(i)]) for i in best]
        assert [v for _, v in g.top] == pytest.approx([float(row[i]) for i in best], abs=1e-5)
    if temperature == 0.0:  # greedy: every token is its position's best
        assert all(g.top[0][0] == g.text for g in got)


def test_ids_and_logprobs_ride_on_events_the_engine_delivers():
    """The engine hands on only events with a chunk or the end: nothing may sit on the others."""
    backend = FakeLM(vocab=12, eos=11)
    sched = SchedulerConfig.for_strategy("quality", beam_width=1, lookahead_tokens=0)  # chunks of many tokens
    job = DecodeJob(backend, backend.new_state(), [1, 2], SamplingParams(max_tokens=30), sched, top_logprobs=1)
    events = []
    while not job.finished:
        events.append(job.step())
    assert any(not ev.chunks for ev in events[:-1])  # some steps showed nothing
    delivered = [ev for ev in events if ev.chunks or ev.done]
    assert [t for ev in delivered for t in ev.tokens] == job.generated
    assert len([lp for ev in delivered for lp in ev.logprobs]) == len(job.generated)


def test_a_cancel_hands_on_what_was_held():
    backend = FakeLM(vocab=12)  # no eos: still running when cancelled
    sched = SchedulerConfig.for_strategy("quality", beam_width=1, lookahead_tokens=0)
    job = DecodeJob(backend, backend.new_state(), [1, 2], SamplingParams(max_tokens=30), sched)
    shown: list[int] = []
    for _ in range(3):
        ev = job.step()
        shown += ev.tokens
    last = job.cancel()
    assert last.done is not None and last.done.reason == "cancelled"
    assert shown + last.tokens == job.generated and len(job.generated) >= 2


def test_zero_alternatives_still_reports_each_token():
    backend = FakeLM(vocab=12, eos=11)
    job, events = run(backend, [4, 5], SamplingParams(max_tokens=10), 0)
    got = [lp for ev in events for lp in ev.logprobs]
    assert len(got) == len(job.generated) and all(g.top == () for g in got)


def test_not_asked_reports_no_logprobs_but_tokens():
    backend = FakeLM(vocab=12, eos=11)
    job, events = run(backend, [4, 5], SamplingParams(max_tokens=10), None)
    assert all(ev.logprobs == [] for ev in events)
    assert [t for ev in events for t in ev.tokens] == job.generated


def test_drafting_reports_the_same_logprobs_as_plain_decoding():
    backend = FakeLM(vocab=12, eos=11)
    params = SamplingParams(max_tokens=40)
    plain, pe = run(backend, [1, 2, 3], params, 2)
    spec, se = run(backend, [1, 2, 3], params, 2, ListDrafter(oracle_drafts(backend)))
    assert spec.drafted > 0  # the drafts were really verified, several tokens per step
    assert spec.generated == plain.generated
    a = [lp for ev in pe for lp in ev.logprobs]
    b = [lp for ev in se for lp in ev.logprobs]
    assert [x.text for x in a] == [x.text for x in b]
    assert [x.logprob for x in a] == pytest.approx([x.logprob for x in b], abs=1e-6)
    for x, y in zip(a, b, strict=True):
        assert [t for t, _ in x.top] == [t for t, _ in y.top]
        assert [v for _, v in x.top] == pytest.approx([v for _, v in y.top], abs=1e-6)
