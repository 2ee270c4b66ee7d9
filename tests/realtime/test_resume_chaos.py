"""Chaos: hypothesis picks where and how sockets drop; the assembled reply must be exact.

≥ 500 disconnects against a deterministic fake model (bounded time), and a smaller run on the
real embedded model. Properties: client text equals the reference, seqs contiguous with no
duplicates kept, exactly one response.done per response.created, and resume_failed only where
the buffer truly lost coverage (here the buffer is large, so never).
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import load_config
from testkit.fake_backend import FakeBackend
from testkit.server import run_server
from tests.resume_client import run_with_drops

DROPS = st.lists(st.tuples(st.integers(0, 25), st.sampled_from(["abort", "close"])), min_size=5, max_size=12)


def check(s, reference: str) -> None:
    assert s.text() == reference
    assert [e["seq"] for e in s.events] == list(range(len(s.events)))
    assert s.count("response.created") == 1 and s.count("response.done") == 1
    assert s.resume_failed == 0  # the replay buffer never lost coverage in this setup
    assert s.server_closes == 0  # every drop was the client's


def test_chaos_500_disconnects_fake_model():
    fake = FakeBackend(answer_tokens=240, step_s=0.001)
    total = {"drops": 0, "runs": 0, "fresh": 0}
    # a client that drops before reading session.created leaves a session it cannot resume: it waits
    # out its grace period, so the server must have room for those orphans
    conf = load_config(None, **{"audio.enabled": False, "limits.max_sessions": 2000, "server.grace_period_s": 5})
    with run_server(conf, fake) as addr:
        reference = asyncio.run(run_with_drops(addr, [])).text()
        assert reference

        @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(DROPS)
        def one(drops):
            s = asyncio.run(run_with_drops(addr, drops))
            check(s, reference)
            total["drops"] += s.drops
            total["runs"] += 1
            total["fresh"] += s.fresh_sessions

        one()
        # sessions whose token the client never saw expire; nothing else is left behind
        busy = addr.call(lambda: addr.services.registry.busy())
    print(f"chaos: {total}")
    assert total["drops"] >= 500, total
    assert busy == 0


@pytest.mark.real_model
def test_chaos_on_the_real_model(real_backend):
    with run_server(load_config(None, **{"audio.enabled": False}), real_backend) as addr:
        reference = asyncio.run(run_with_drops(addr, [], limit_s=120)).text()
        drops = 0
        for plan in ([(3, "abort"), (4, "close")], [(1, "close"), (6, "abort"), (2, "abort")]):
            s = asyncio.run(run_with_drops(addr, plan, limit_s=120))
            check(s, reference)
            drops += s.drops
    print(f"chaos real model: {drops} drops")
    assert drops >= 5
