"""Continuous batching on the embedded GGUF through llama.cpp: one llama_batch for many sequences
gives every row bitwise the logits of that sequence stepped alone, so greedy text in a batch equals
the same prompt answered alone (drafting inside the batch included)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'stream-omni[llama]')")

from models.decode import ContextOverflow, DecodeJob, JobEvents  # noqa: E402
from models.drafters import PromptLookupDrafter  # noqa: E402
from models.engine import Engine  # noqa: E402
from models.llama_cpp import LlamaCppBackend, LlamaCppConfig  # noqa: E402
from models.sampling import SamplingParams  # noqa: E402
from models.scheduler import SchedulerConfig  # noqa: E402
from models.verify import DraftVerify, FixedLookahead  # noqa: E402

pytestmark = pytest.mark.real_model

QUESTIONS = [
    "Why is the sky blue?",
    "What makes a good friend?",
    "How do airplanes stay in the air?",
    "Name three fruits and their colors.",
    "Repeat after me: the cat sat on the mat, the cat sat on the mat.",
    "What is photosynthesis?",
]
WAIT = 300.0  # seconds for a whole batched run on a loaded 2-core box


@pytest.fixture(scope="module")
def backend() -> Iterator[LlamaCppBackend]:
    b = LlamaCppBackend(LlamaCppConfig(threads=2, n_ctx=512, n_batch=128, n_seq=8))
    yield b
    b.close()


def prompt(b: LlamaCppBackend, q: str) -> list[int]:
    return b.chat_tokens([{"role": "user", "content": q}])


def test_one_batch_of_many_sequences_gives_each_row_its_alone_logits_bitwise(backend: LlamaCppBackend) -> None:
    ps = [prompt(backend, q) for q in QUESTIONS[:4]]
    # alone: prefill, then a 1-token step and a 3-token verify-like block
    ref = []
    for p in ps:
        s = backend.new_state()
        rows = [backend.forward(s, p, 1), backend.forward(s, [28], 1), backend.forward(s, [29, 30, 31], 3)]
        ref.append(rows)
        backend.crop(s, 0)
    states = [backend.new_state() for _ in ps]
    # the same work, batched differently: prefills together, then a mix of 1-token and 3-token items
    got = [[r] for r in backend.forward_batch([(s, p, 1) for s, p in zip(states, ps, strict=True)])]
    for g, r in zip(got, backend.forward_batch([(s, [28], 1) for s in states]), strict=True):
        g.append(r)
    for g, r in zip(got, backend.forward_batch([(s, [29, 30, 31], 3) for s in states]), strict=True):
        g.append(r)
    for g, r in zip(got, ref, strict=True):
        for a, b in zip(g, r, strict=True):
            assert a.shape == b.shape and a.dtype == np.float32
            assert np.array_equal(a, b)
    for s, p in zip(states, ps, strict=True):
        assert s.tokens == [*p, 28, 29, 30, 31]


def test_a_bad_item_changes_no_state_of_the_batch(backend: LlamaCppBackend) -> None:
    a, big = backend.new_state(), backend.new_state()
    backend.forward(a, prompt(backend, "hello"), 1)
    before = list(a.tokens)
    with pytest.raises(ValueError, match="exceed the context"):
        backend.forward_batch([(a, [5], 1), (big, list(range(10, 10 + backend.max_context + 1)), 1)])
    assert a.tokens == before and big.tokens == []
    row = backend.forward(a, [5], 1)  # the good sequence goes on as if nothing happened
    ref = backend.new_state()
    assert np.array_equal(row, backend.forward(ref, [*before, 5], 1))
    with pytest.raises(ContextOverflow):
        job(backend, "x " * 600)


def job(b: LlamaCppBackend, q: str, n: int = 24, k: int = 0) -> DecodeJob:
    spec = DraftVerify(PromptLookupDrafter(3, 1), FixedLookahead(k)) if k else None
    return DecodeJob(
        b,
        b.new_state(),
        prompt(b, q),
        SamplingParams(temperature=0.0, max_tokens=n),
        SchedulerConfig(lookahead_tokens=k, draft_before_first_text=True),
        drafter=spec,
        verifier=spec,
    )


def alone(b: LlamaCppBackend, q: str, n: int = 24) -> list[int]:
    j = job(b, q, n)
    while not j.finished:
        j.step()
    b.crop(j.state, 0)
    return list(j.generated)


def batched(b: LlamaCppBackend, qs: list[str], k: int, draft_max_batch: int, n: int = 24) -> list[DecodeJob]:
    jobs = [job(b, q, n, k) for q in qs]
    left = len(jobs)
    all_done = threading.Event()
    lock = threading.Lock()

    def sink(ev: JobEvents) -> None:
        nonlocal left
        if ev.done is not None:
            with lock:
                left -= 1
                if left == 0:
                    all_done.set()

    eng = Engine(max_running=8, prefill_chunk=32, draft_max_batch=draft_max_batch)
    try:
        for j in jobs:
            eng.submit(j, sink)
        assert all_done.wait(WAIT)
    finally:
        eng.close()
    for j in jobs:
        b.crop(j.state, 0)
    return jobs


def test_greedy_text_of_each_batched_session_equals_the_same_prompt_answered_alone(backend: LlamaCppBackend) -> None:
    ref = [alone(backend, q) for q in QUESTIONS]
    jobs = batched(backend, QUESTIONS, k=0, draft_max_batch=0)
    assert [j.generated for j in jobs] == ref
    # and with drafts verified inside the shared batch (prompt lookup, 4 per step)
    spec = batched(backend, QUESTIONS[3:], k=4, draft_max_batch=8)
    assert [j.generated for j in spec] == ref[3:]
    assert sum(j.drafted for j in spec) > 0
