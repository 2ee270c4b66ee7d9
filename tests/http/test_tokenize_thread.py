"""The tokenizer thread: the loop's synchronous counts jump the queue of prompts, and a raw prompt far
past the context is refused after a bounded head of it is tokenized."""

from __future__ import annotations

import threading

import pytest

from gateway.core.tokenize import COUNT, HEAD_CHARS_PER_TOKEN, TEXT, TooManyTokens, _PriorityWorker, encode_within


def test_a_count_runs_before_prompts_queued_ahead_of_it():
    worker, gate, ran = _PriorityWorker("test-tokenize"), threading.Event(), []
    blocker = worker.submit(gate.wait, 30, priority=TEXT)  # holds the thread while the queue fills
    prompts = [worker.submit(ran.append, f"prompt {i}", priority=TEXT) for i in range(3)]
    count = worker.submit(ran.append, "count", priority=COUNT)
    gate.set()
    count.result(timeout=30)
    for f in [blocker, *prompts]:
        f.result(timeout=30)
    assert ran == ["count", "prompt 0", "prompt 1", "prompt 2"]


def test_a_failing_job_reaches_its_caller_and_the_thread_goes_on():
    worker = _PriorityWorker("test-tokenize")
    with pytest.raises(ZeroDivisionError):
        worker.submit(lambda: 1 / 0).result(timeout=30)
    assert worker.submit(len, "abc").result(timeout=30) == 3


def test_a_prompt_far_past_the_context_is_refused_by_its_head():
    seen: list[int] = []

    def encode(text: str) -> list[int]:  # one token per character
        seen.append(len(text))
        return list(range(len(text)))

    limit = 64
    with pytest.raises(TooManyTokens, match="the model's context is 64"):
        encode_within(encode, "x" * 1_000_000, limit)
    assert seen == [HEAD_CHARS_PER_TOKEN * limit]  # the head only, not the million characters


def test_a_long_text_of_long_tokens_is_still_tokenized_whole():
    def encode(text: str) -> list[int]:  # one token per 32 characters: the head stays under the limit
        return list(range(len(text) // 32))

    text = "y" * (HEAD_CHARS_PER_TOKEN * 64 + 100)
    assert len(encode_within(encode, text, 64)) == len(text) // 32
    assert len(encode_within(encode, "short", 64)) == 0
