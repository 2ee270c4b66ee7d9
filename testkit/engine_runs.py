"""Run greedy responses through a real ``models.engine.Engine`` and wait for them (engine tests)."""

from __future__ import annotations

import threading
from typing import Any

from models.decode import DecodeJob
from models.engine import Engine
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig


def greedy_job(backend: Any, prompt: list[int], max_tokens: int) -> DecodeJob:
    """A greedy response to ``prompt`` on a fresh conversation, no drafting."""
    return DecodeJob(
        backend, backend.new_state(), prompt, SamplingParams(max_tokens=max_tokens), SchedulerConfig(lookahead_tokens=0)
    )


def run_on_engine(jobs: list[DecodeJob], prefill_chunk: int, timeout_s: float = 60.0) -> list[list[int]]:
    """Submit ``jobs`` at once to an engine that can run 8, wait for every ``done`` (a stall fails
    after ``timeout_s``), close it; → each job's generated ids."""
    done = threading.Semaphore(0)
    eng = Engine(max_running=8, prefill_chunk=prefill_chunk)
    try:
        for j in jobs:
            eng.submit(j, lambda ev: done.release() if ev.done is not None else None)
        for _ in jobs:
            assert done.acquire(timeout=timeout_s), "a response never finished"
    finally:
        eng.close()
    return [j.generated for j in jobs]
