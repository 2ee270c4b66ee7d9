"""A job's ``phase`` (``models.lifecycle.JobPhase``, as llama.cpp's ``slot_state``): set where each phase
begins, and what the engine asks of a job (``prompt_pending``, ``prefilling``, ``finished``) read from it.
Pure: the fake backend, stepped by hand."""

from __future__ import annotations

from models.decode import DecodeJob
from models.lifecycle import JobPhase
from models.remote import RemoteJob
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from testkit.fake_backend import FakeBackend


def job(fake: FakeBackend, text: str, n: int = 20, strategy: str = "fast") -> DecodeJob:
    prompt = fake.chat_tokens([{"role": "user", "content": text}])
    sched = SchedulerConfig.for_strategy(strategy, lookahead_tokens=0)
    return DecodeJob(fake, fake.new_state(), prompt, SamplingParams(max_tokens=n), sched)


def asks(j: DecodeJob) -> tuple[JobPhase, bool, bool, bool]:
    return j.phase, j.prompt_pending, j.prefilling, j.finished


def test_a_chunked_prefill_goes_queued_prefill_decode_done():
    fake = FakeBackend(answer_tokens=50)
    j = job(fake, "a b c d e f g h i j", n=3)
    assert asks(j) == (JobPhase.QUEUED, True, False, False)
    assert j.plan(prefill_budget=0) is None and j.phase is JobPhase.PREFILL  # admitted: waits for budget
    assert asks(j) == (JobPhase.PREFILL, True, True, False)
    pieces = 0
    while j.phase is JobPhase.PREFILL:
        fw = j.plan(prefill_budget=4)
        assert fw is not None and fw.prefill and len(fw.tokens) <= 4 and not j.generated
        j.complete(fake.forward(j.state, fw.tokens, fw.n_logits))
        pieces += 1
    assert pieces == -(-len(j.prompt_ids) // 4) and j.t_prefilled is not None
    assert asks(j) == (JobPhase.DECODE, False, False, False) and len(j.generated) == 1  # its first token
    while j.phase is JobPhase.DECODE:
        fw = j.plan()
        assert fw is not None and not fw.prefill
        ev = j.complete(fake.forward(j.state, fw.tokens, fw.n_logits))
    assert asks(j) == (JobPhase.DONE, False, False, True) and ev.done is not None and ev.done.reason == "length"
    assert j.plan() is None


def test_a_cancel_in_any_phase_is_done_and_ends_once():
    fake = FakeBackend()
    queued, prefilling = job(fake, "hi"), job(fake, "a b c d e f g h")
    prefilling.plan(prefill_budget=0)
    for j in (queued, prefilling):
        assert j.cancel().done is not None and asks(j) == (JobPhase.DONE, False, False, True)
        assert j.cancel().done is None  # once only


def test_beam_search_prefills_in_its_first_step():
    fake = FakeBackend(answer_tokens=30)
    j = job(fake, "hello there", n=12, strategy="quality")
    assert not j.batchable and j.phase is JobPhase.QUEUED
    j.step()
    assert j.phase in (JobPhase.DECODE, JobPhase.DONE) and j.t_prefilled is not None and j.generated
    while not j.finished:
        j.step()
    assert j.phase is JobPhase.DONE and len(j.generated) <= 12


def test_a_remote_job_decodes_from_its_first_delta():
    model = type("M", (), {"engine_id": "m", "config": type("C", (), {"extra_body": {}})()})()
    j = RemoteJob(model, [{"role": "user", "content": "hi"}], SamplingParams(), SchedulerConfig())  # type: ignore[arg-type]
    assert j.phase is JobPhase.QUEUED
    j.feed({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    assert j.phase is JobPhase.QUEUED  # no text yet
    j.feed({"choices": [{"index": 0, "delta": {"content": "Hello there"}}]})
    assert j.phase is JobPhase.DECODE
    assert j.fail("engine_timeout").done is not None and j.phase is JobPhase.DONE and j.finished
