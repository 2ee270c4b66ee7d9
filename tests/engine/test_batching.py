"""Continuous batching in models.engine on the fake backend: one forward per step for every
running response, chunked prefill, FIFO admission, cancel and errors isolated, greedy identity,
speculation paused under load; the adaptive lookahead weighs the batch."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from models.decode import DecodeJob, JobEvents
from models.drafters import PromptLookupDrafter
from models.engine import Engine
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from models.verify import AdaptiveLookahead, DraftVerify, FixedLookahead, LookaheadConfig
from testkit.fake_backend import FakeBackend

WAIT = 10.0  # seconds any one response may take before the test fails


def make_job(fake: FakeBackend, text: str, n: int = 40, k: int = 0) -> DecodeJob:
    spec = DraftVerify(PromptLookupDrafter(3, 1), FixedLookahead(k)) if k else None
    return DecodeJob(
        fake,
        fake.new_state(),
        fake.chat_tokens([{"role": "user", "content": text}]),
        SamplingParams(temperature=0.0, max_tokens=n),
        SchedulerConfig(lookahead_tokens=k, draft_before_first_text=True),
        drafter=spec,
        verifier=spec,
    )


def alone(text: str, n: int = 40, k: int = 0, answer: int = 30) -> str:
    job = make_job(FakeBackend(answer_tokens=answer), text, n, k)
    out: list[str] = []
    while not job.finished:
        out += [c.text for c in job.step().chunks]
    return "".join(out)


class Collect:
    """A sink: the events of one response, its text, and when it ended."""

    def __init__(self, order: list[str] | None = None, name: str = "") -> None:
        self.events: list[JobEvents] = []
        self.done = threading.Event()
        self.first = threading.Event()
        self.order, self.name = order, name

    def __call__(self, ev: JobEvents) -> None:
        if ev.chunks and not self.first.is_set():
            if self.order is not None:
                self.order.append(self.name)
            self.first.set()
        self.events.append(ev)
        if ev.done is not None:
            self.done.set()

    @property
    def text(self) -> str:
        return "".join(c.text for e in self.events for c in e.chunks)

    @property
    def reason(self) -> str | None:
        return next((e.done.reason for e in self.events if e.done is not None), None)


QUESTIONS = [f"question number {i} about topic {i * 7 % 5}" for i in range(8)]


def run_all(fake: FakeBackend, texts: list[str], k: int = 0, **engine_kw: int) -> list[Collect]:
    eng = Engine(**{"max_running": 16, "max_waiting": 16, **engine_kw})
    try:
        sinks = [Collect() for _ in texts]
        for t, s in zip(texts, sinks, strict=True):
            eng.submit(make_job(fake, t, k=k), s)
        for s in sinks:
            assert s.done.wait(WAIT)
        return sinks
    finally:
        eng.close()


def test_every_running_response_shares_one_forward_per_step_and_keeps_its_greedy_text():
    fake = FakeBackend(answer_tokens=30, step_s=0.001)
    sinks = run_all(fake, QUESTIONS)
    assert [s.text for s in sinks] == [alone(q) for q in QUESTIONS]
    assert all(s.reason == "stop" for s in sinks)
    assert max(len(b) for b in fake.batches) == len(QUESTIONS)  # all eight in one forward
    # ≈ one forward per token of the longest answer, not one per token of every answer
    assert len(fake.batches) < 2 * 31


def test_a_verify_block_shares_the_batch_with_single_tokens_and_greedy_text_is_unchanged():
    fake = FakeBackend(answer_tokens=40, step_s=0.001)
    texts = QUESTIONS[:4]
    sinks = run_all(fake, texts, k=4, draft_max_batch=16)
    assert [s.text for s in sinks] == [alone(q, k=4, answer=40) for q in texts]
    mixed = [b for b in fake.batches if any(n > 1 for _, n in b) and any(t == 1 for t, _ in b)]
    assert mixed, "no step carried a draft-verify block beside another response's single token"


def test_speculation_pauses_while_the_batch_is_past_draft_max_batch():
    fake = FakeBackend(answer_tokens=40, step_s=0.001)
    sinks = run_all(fake, QUESTIONS[:6], k=4, draft_max_batch=2)
    assert [s.text for s in sinks] == [alone(q, k=4, answer=40) for q in QUESTIONS[:6]]
    for b in fake.batches:
        if len(b) > 2:
            assert all(n == 1 for _, n in b), b


def test_a_new_prompt_is_prefilled_in_pieces_mixed_into_running_decode_steps():
    fake = FakeBackend(answer_tokens=60, step_s=0.002)
    eng = Engine(max_running=4, prefill_chunk=8)
    try:
        a, b = Collect(), Collect()
        eng.submit(make_job(fake, "short one", n=60), a)
        assert a.first.wait(WAIT)
        long_text = " ".join(f"w{i}" for i in range(100))
        eng.submit(make_job(fake, long_text, n=10), b)
        assert a.done.wait(WAIT) and b.done.wait(WAIT)
    finally:
        eng.close()
    assert b.text == alone(long_text, n=10, answer=60) and a.text == alone("short one", n=60, answer=60)
    prefill = [t for batch in fake.batches for t, n in batch if n == 1 and t > 1]
    assert max(prefill) <= 8  # no step prefilled more than prefill_chunk tokens
    assert sum(1 for batch in fake.batches if (8, 1) in batch and (1, 1) in batch) >= 10  # A kept decoding


def test_fifo_admission_and_a_cancel_ends_only_its_own_response():
    fake = FakeBackend(answer_tokens=200, step_s=0.002)
    eng = Engine(max_running=2, max_waiting=8)
    order: list[str] = []
    try:
        sinks = {name: Collect(order, name) for name in "abcd"}
        handles = {name: eng.submit(make_job(fake, f"prompt {name}", n=50), sinks[name]) for name in "abcd"}
        assert sinks["b"].first.wait(WAIT)
        handles["b"].cancel()
        for s in sinks.values():
            assert s.done.wait(WAIT)
    finally:
        eng.close()
    assert order.index("c") < order.index("d")  # c was admitted first, into b's place
    assert sinks["b"].reason == "cancelled"
    for name in "acd":
        assert sinks[name].text == alone(f"prompt {name}", n=50, answer=200)
        assert sinks[name].reason == "length"


class PoisonBackend(FakeBackend):
    """Fails every forward that touches one conversation."""

    def __init__(self, **kw: float) -> None:
        super().__init__(**kw)
        self.poisoned: set[int] = set()

    def forward(self, state, tokens, n_logits=1):  # type: ignore[no-untyped-def]
        if id(state) in self.poisoned and len(state.tokens) > 0:
            raise RuntimeError("kernel failure")
        return super().forward(state, tokens, n_logits)


def test_a_failing_forward_ends_only_its_response_and_the_others_text_is_intact():
    fake = PoisonBackend(answer_tokens=30, step_s=0.001)
    eng = Engine(max_running=8)
    try:
        jobs = [make_job(fake, q) for q in QUESTIONS[:4]]
        fake.poisoned.add(id(jobs[1].state))  # its prefill works; its first decode step fails
        sinks = [Collect() for _ in jobs]
        for j, s in zip(jobs, sinks, strict=True):
            eng.submit(j, s)
        for s in sinks:
            assert s.done.wait(WAIT)
    finally:
        eng.close()
    assert sinks[1].reason == "error"
    for i in (0, 2, 3):
        assert sinks[i].reason == "stop" and sinks[i].text == alone(QUESTIONS[i])


def test_step_is_plan_then_complete_on_a_batch_of_one():
    fake = FakeBackend(answer_tokens=12)
    job = make_job(fake, "hello there", n=20)
    fw = job.plan()
    assert fw is not None and fw.prefill and fw.n_logits == 1 and fw.tokens == job.prompt_ids
    with pytest.raises(AssertionError):
        job.plan()  # one forward in flight at a time
    ev = job.complete(fake.forward(job.state, fw.tokens, fw.n_logits))
    assert len(job.generated) == 1 and not job.finished and ev.done is None
    piece = make_job(fake, "a b c d e f g h i j", n=20)
    first = piece.plan(prefill_budget=4)
    assert first is not None and first.tokens == piece.prompt_ids[:4]
    assert piece.complete(fake.forward(piece.state, first.tokens, 1)).chunks == [] and not piece.generated


def _adaptive(curve: Callable[[int], float]) -> AdaptiveLookahead:
    cfg = LookaheadConfig(k_max=8, prior_accept=0.8)
    return AdaptiveLookahead(tuple(curve(m) for m in range(40)), cfg)


def test_the_adaptive_lookahead_drafts_alone_but_not_when_the_batch_already_fills_the_step():
    # a CPU-like verify cost: two tokens cost one, then each extra token a quarter of a step
    pol = _adaptive(lambda m: max(1.0, 0.75 + 0.25 * m))
    assert pol.lookahead(0) > 0
    assert pol.lookahead(15) == 0
    # a flat cost (a GPU far from full): drafting still pays inside a big batch
    assert _adaptive(lambda m: 1.0 + 0.001 * m).lookahead(15) > 0
