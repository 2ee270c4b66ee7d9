"""testkit.loopwatch: the monitor every test server runs under (tests/conftest.py fails the test during
which a server's loop stalls) catches a callback that computes too long, names it, and nests."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from testkit.loopwatch import Stall, report, watch_loop


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def hog() -> None:
    _spin(0.15)  # computes on the loop: what a client's input must never make a server do


async def polite() -> None:
    for _ in range(10):
        await asyncio.sleep(0.01)


def test_a_callback_computing_past_the_bound_is_a_named_stall_in_every_watch():
    loop, log = asyncio.new_event_loop(), []
    try:
        with watch_loop(loop, log=log) as outer, watch_loop(loop) as inner:
            loop.run_until_complete(polite())
            assert not outer.stalls and outer.callbacks > 0
            loop.run_until_complete(hog())
        loop.run_until_complete(hog())  # no longer watched
    finally:
        loop.close()
    for watch in (outer, inner):
        assert len(watch.stalls) == 1 and watch.stalls[0].cpu_s >= 0.15
        assert "hog" in watch.stalls[0].callback
    assert log == outer.stalls
    with pytest.raises(AssertionError, match="stalled 1 time"):
        inner.check()


def test_a_blocking_call_counts_by_its_wall_time():
    loop = asyncio.new_event_loop()

    async def sleeper() -> None:
        time.sleep(0.2)  # noqa: ASYNC251  (the stall under test: it blocks without computing)

    try:
        with watch_loop(loop, wall_s=0.1) as watch:
            loop.run_until_complete(sleeper())
    finally:
        loop.close()
    assert [s.wall_s >= 0.2 for s in watch.stalls] == [True]
    assert "sleeper" in report(watch.stalls) and isinstance(watch.stalls[0], Stall)


def test_time_in_the_garbage_collector_is_not_the_callback_s():
    loop = asyncio.new_event_loop()
    gc.disable()  # built without the collections its growth would trigger (each walks the whole process)
    try:
        heap = [[i] for i in range(1_000_000)]  # a full collection walks all of them
    finally:
        gc.enable()

    async def collects() -> None:
        gc.collect()

    async def computes() -> None:
        _spin(0.02)

    try:
        t0 = time.thread_time()
        gc.collect()
        full = time.thread_time() - t0
        with watch_loop(loop, cpu_s=0.01) as watch:
            loop.run_until_complete(collects())
            loop.run_until_complete(computes())
    finally:
        loop.close()
    assert full > 0.02, f"a collection of this heap took {full * 1000:.1f} ms: too quick to test with"
    assert [s.callback for s in watch.stalls if "collects" in s.callback] == []
    assert any("computes" in s.callback for s in watch.stalls)
    assert len(heap) == 1_000_000
