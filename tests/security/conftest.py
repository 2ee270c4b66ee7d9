"""Helpers for the adversarial suite: a fake backend, a /health prober that measures latency."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from testkit.fake_backend import FakeBackend

TWO_KEYS = {"audio.enabled": False, "server.api_keys": ["key-alice", "key-bob"]}


@pytest.fixture(scope="module")
def fake() -> Any:
    return FakeBackend(answer_tokens=30, step_s=0.002)


def health_latency(addr: str, timeout: float = 5.0) -> float:
    """Seconds one GET /health took on a fresh connection (fails when it takes over ``timeout``)."""
    t0 = time.perf_counter()
    r = httpx.get(f"http://{addr}/health", timeout=timeout)
    assert r.status_code == 200
    return time.perf_counter() - t0
