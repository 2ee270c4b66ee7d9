"""Client work yields to decoding: the per-key body-byte budget (fake clock; a real server's 429), worker priority."""

from __future__ import annotations

import httpx
import pytest

from gateway.http.budget import MIN_COST, REQUEST_BURST, ByteBudget
from testkit.fake_backend import FakeBackend

MIB = 1024 * 1024


def test_a_key_spends_its_burst_then_waits_for_the_rate_and_other_keys_are_untouched():
    b = ByteBudget(rate=MIB, burst=4 * MIB)
    assert b.admit("a", 4 * MIB, now=0.0) == 0.0  # one largest body fits a full budget
    assert b.admit("a", 2 * MIB, now=0.5) == 2.0  # 0.5 MiB back of the 2 it needs: 1.5 s, whole seconds up
    assert b.admit("b", 4 * MIB, now=0.5) == 0.0  # another key has its own budget
    assert b.admit("a", 2 * MIB, now=2.0) == 0.0  # refused requests cost nothing: 2 MiB back by now
    assert b.admit("a", None, now=2.0) == 1.0  # a body of unknown length costs the minimum, still too much


def test_small_requests_cost_the_minimum_and_a_huge_declared_length_at_most_the_burst():
    b = ByteBudget(rate=MIN_COST, burst=10 * MIN_COST)
    assert all(b.admit("k", 1, now=0.0) == 0.0 for _ in range(10))
    assert b.admit("k", 1, now=0.0) == 1.0
    b = ByteBudget(rate=MIB, burst=MIB)
    assert b.admit("k", 1 << 40, now=0.0) == 0.0  # the body-size limit refuses it next, with a 413


def test_small_requests_come_at_most_a_burst_at_once_then_at_the_rate_and_a_refused_one_costs_no_bytes():
    b = ByteBudget(rate=32 * MIN_COST, burst=1000 * MIN_COST)  # bytes for 1000; requests: 32 a second
    assert all(b.admit("k", 1, now=0.0) == 0.0 for _ in range(REQUEST_BURST))
    assert b.admit("k", 1, now=0.0) == 1.0
    # 1/32 s later: one request back, and 968 + 1 MIN_COST of bytes only if the refused one cost none
    assert b.admit("k", 969 * MIN_COST, now=1 / 32) == 0.0


def test_buckets_are_bounded_least_recently_used_first():
    b = ByteBudget(rate=1.0, burst=MIN_COST, max_keys=2)
    b.admit("a", None, 0.0)
    b.admit("b", None, 0.0)
    b.admit("a", None, 0.0)  # refused; "a" is now the most recently used
    b.admit("c", None, 0.0)  # "b" goes
    assert b.admit("a", None, 0.0) > 0.0  # "a" was kept, still empty
    assert b.admit("b", None, 0.0) == 0.0  # "b" was forgotten: a fresh, full bucket


@pytest.mark.server
def test_a_key_past_its_byte_budget_gets_429_with_retry_after_before_its_body_is_read(server_factory):
    cfg = {
        "server.api_keys": ["key-a", "key-b"],
        "limits.http_bytes_per_s_per_key": 1,  # one largest body, then one byte a second
        "limits.max_http_body_bytes": 1_000_000,
        "files.max_file_bytes": 500_000,
        "audio.enabled": False,
    }
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
    with server_factory(FakeBackend(), **cfg) as addr, httpx.Client(timeout=30) as c:
        url = f"http://{addr}/v1/chat/completions"
        big = {**body, "messages": [{"role": "user", "content": "x" * 999_000}]}
        first = c.post(url, json=big, headers={"Authorization": "Bearer key-a"})
        assert first.status_code != 429, first.text
        r = c.post(url, json=body, headers={"Authorization": "Bearer key-a"})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "rate_limit_exceeded"
        assert int(r.headers["retry-after"]) >= 1
        other = c.post(url, json=body, headers={"Authorization": "Bearer key-b"})
        assert other.status_code != 429, other.text  # the budget is per key
        assert c.get(f"http://{addr}/v1/models", headers={"Authorization": "Bearer key-a"}).status_code == 200


def test_client_work_threads_run_below_the_engines_priority():
    """Grammar compilation yields the cores to decoding (Linux schedules threads singly); the tokenizer,
    which the loop waits on to count tokens, keeps the process's priority."""
    import sys

    from gateway.core import grammars, tokenize
    from gateway.core.workers import niceness

    if not sys.platform.startswith("linux"):
        pytest.skip("per-thread niceness is Linux's")
    mine = niceness()
    assert mine is not None
    assert grammars._POOL.submit(niceness).result(timeout=30) == min(19, mine + 10)
    assert tokenize._POOL.submit(niceness).result(timeout=30) == mine
