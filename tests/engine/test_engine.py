"""models.engine with fake jobs: round-robin, busy, cancel within one step, errors isolated."""

from __future__ import annotations

import threading
import time

import pytest

from models.decode import Done, JobEvents
from models.engine import Engine, EngineBusy
from models.scheduler import Chunk


class FakeJob:
    def __init__(self, name: str, steps: int, log: list[str], delay: float = 0.0, fail_at: int = -1):
        self.name, self.left, self.log, self.delay, self.fail_at = name, steps, log, delay, fail_at
        self.finished = False
        self.state = object()
        self.n = 0

    def step(self) -> JobEvents:
        time.sleep(self.delay)
        self.n += 1
        if self.n == self.fail_at:
            raise RuntimeError("boom")
        self.log.append(self.name)
        self.left -= 1
        if self.left == 0:
            self.finished = True
            return JobEvents([Chunk(self.name, 1, 0)], Done("stop", {}))
        return JobEvents([Chunk(self.name, 1, 0)])

    def cancel(self) -> JobEvents:
        self.finished = True
        return JobEvents(done=Done("cancelled", {}))


def collector():
    got: list[JobEvents] = []
    done = threading.Event()

    def sink(ev: JobEvents) -> None:
        got.append(ev)
        if ev.done:
            done.set()

    return got, done, sink


def test_jobs_interleave_step_by_step():
    eng = Engine(max_running=2, max_waiting=4)
    log: list[str] = []
    _, da, sa = collector()
    _, db, sb = collector()
    eng.submit(FakeJob("a", 6, log, delay=0.01), sa)
    eng.submit(FakeJob("b", 6, log, delay=0.01), sb)
    assert da.wait(5) and db.wait(5)
    eng.close()
    # once both run they alternate: neither finishes all its steps before the other starts
    assert log.index("b") < 3 and log.index("a") < 3
    tail = log[log.index("b") :] if log[0] == "a" else log[log.index("a") :]
    assert any(x != y for x, y in zip(tail, tail[1:], strict=False))
    assert "".join(log).count("aaa") == 0 and "".join(log).count("bbb") == 0


def test_busy_past_waiting_depth():
    eng = Engine(max_running=1, max_waiting=1)
    log: list[str] = []
    eng.submit(FakeJob("a", 200, log, delay=0.01), collector()[2])
    time.sleep(0.05)
    eng.submit(FakeJob("b", 1, log), collector()[2])
    with pytest.raises(EngineBusy):
        eng.submit(FakeJob("c", 1, log), collector()[2])
    eng.close()


def test_cancel_stops_within_one_step():
    eng = Engine()
    log: list[str] = []
    got, done, sink = collector()
    job = FakeJob("a", 10_000, log, delay=0.005)
    h = eng.submit(job, sink)
    time.sleep(0.05)
    h.cancel()
    n_at_cancel = job.n
    assert done.wait(2)
    assert job.n - n_at_cancel <= 1
    assert got[-1].done.reason == "cancelled"
    eng.close()


def test_a_failing_job_ends_only_itself():
    eng = Engine(max_running=2)
    log: list[str] = []
    ga, da, sa = collector()
    gb, db, sb = collector()
    eng.submit(FakeJob("bad", 5, log, fail_at=2), sa)
    eng.submit(FakeJob("good", 5, log), sb)
    assert da.wait(5) and db.wait(5)
    assert ga[-1].done.reason == "error" and gb[-1].done.reason == "stop"
    eng.close()


def test_call_runs_on_the_worker_thread_between_steps_and_returns_or_raises():
    """Start-up work that touches the model (loading, probes) runs on the thread that decodes."""
    engine = Engine()
    try:
        log: list[str] = []
        threads: set[int] = set()

        class Recording(FakeJob):
            def step(self) -> JobEvents:
                threads.add(threading.get_ident())
                return super().step()

        _, _, sink = collector()
        engine.submit(Recording("a", 5, log, delay=0.005), sink)
        worker = engine.call(threading.get_ident).result(5)
        assert worker != threading.get_ident()
        assert engine.call(lambda x, y: x + y, 2, 3).result(5) == 5
        with pytest.raises(ZeroDivisionError):
            engine.call(lambda: 1 / 0).result(5)
        assert engine.call(lambda: "still alive").result(5) == "still alive"
        deadline = time.monotonic() + 5
        while len(log) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log == ["a"] * 5 and threads == {worker}
    finally:
        engine.close()


def test_the_idle_hook_runs_in_pieces_on_the_worker_only_while_it_has_nothing_else_to_do():
    """Idle work (readying the next conversation's cache) never runs between a job's steps, and a
    job that arrives while it runs waits for the piece in progress only, not for all of it."""
    engine = Engine()
    try:
        log: list[str] = []
        threads: set[int] = set()
        pieces_left = [3]

        def hook() -> bool:
            threads.add(threading.get_ident())
            log.append("idle")
            time.sleep(0.02)
            pieces_left[0] -= 1
            return pieces_left[0] > 0

        engine.on_idle(hook)  # nothing to do yet: it runs now, to the end
        deadline = time.monotonic() + 5
        while pieces_left[0] > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert log == ["idle"] * 3  # and not again: it said it was done
        worker = engine.call(threading.get_ident).result(5)
        assert threads == {worker}

        pieces_left[0] = 10_000  # a long stretch of idle work; the call above made it due again
        while log.count("idle") < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        at_submit = len(log)
        _, done, sink = collector()
        engine.submit(FakeJob("a", 4, log, delay=0.01), sink)
        assert done.wait(5)
        first = log.index("a")
        assert log[at_submit:first].count("idle") <= 1  # the piece in progress, at most
        assert log[first : first + 4] == ["a"] * 4  # no idle work between a job's steps
        time.sleep(0.1)
        assert log[first + 4 :] and set(log[first + 4 :]) == {"idle"}  # resumed once the job was done
    finally:
        engine.close()


def test_a_failing_idle_hook_is_logged_and_tried_again_after_the_next_work(caplog):
    engine = Engine()
    try:
        calls: list[int] = []

        def hook() -> bool:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("boom")
            return False

        engine.on_idle(hook)
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert len(calls) == 1 and "idle hook failed" in caplog.text  # not retried while idle
        assert engine.call(lambda: "alive").result(5) == "alive"
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) == 2
    finally:
        engine.close()


@pytest.mark.server
def test_the_app_loads_and_probes_the_model_on_the_engine_thread(tiny_backend):
    """gateway.wiring.app runs the backend loader and the speculator's cost probe on the engine's thread
    (llama.cpp slows ≈ 2× once a second thread has run it; see models/engine.py)."""
    from gateway.core.config import load_config
    from testkit.live_server import run_server

    seen: dict[str, int] = {}

    def loader(_cfg):
        seen["loader"] = threading.get_ident()
        return tiny_backend

    original = tiny_backend.forward

    def forward(state, tokens, n_logits=1):
        seen.setdefault("first_forward", threading.get_ident())
        return original(state, tokens, n_logits)

    cfg = load_config(None, **{"audio.enabled": False, "speculative.drafter": "prompt_lookup"})
    tiny_backend.forward = forward
    try:
        with run_server(cfg, None, loader=loader) as addr:
            worker = addr.services.engine.call(threading.get_ident).result(5)
    finally:
        del tiny_backend.forward
    assert seen["loader"] == worker
    assert seen["first_forward"] == worker  # the verify-cost probe at start-up


@pytest.mark.server
def test_the_app_keeps_its_start_up_heap_out_of_the_cyclic_gc_while_it_serves(tiny_backend):
    """A full collection over the loaded models' objects takes 100+ ms here; the app freezes them
    after start-up (so collections never walk them mid-response) and unfreezes them when it stops."""
    import gc

    from gateway.core.config import load_config
    from testkit.live_server import run_server

    assert gc.get_freeze_count() == 0
    cfg = load_config(None, **{"audio.enabled": False, "speculative.drafter": "none"})
    with run_server(cfg, tiny_backend):
        assert gc.get_freeze_count() > 10_000
    assert gc.get_freeze_count() == 0


@pytest.mark.server
def test_the_server_readies_the_next_conversations_cache_while_idle(tiny_backend):
    """Real uvicorn + WebSocket: at start-up and after each response the engine's idle hook leaves
    one zero-filled cache ready; a new conversation's first forward takes it (no fresh pages in
    its TTFT), and the hook readies another."""
    import asyncio

    from gateway.core.config import load_config
    from testkit.live_server import run_server
    from tests.wsclient import RealtimeClient

    ff = tiny_backend.fast
    ff._spare.clear()

    def ready_spare(timeout: float = 5.0) -> object:
        deadline = time.monotonic() + timeout
        while ff.spare_count < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ff.spare_count == 1
        return ff._spare[-1][0]

    async def one_response(addr: str) -> dict:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        done = await c.ask("hello there", max_output_tokens=4)
        await c.ws.close()
        return done

    cfg = load_config(None, **{"audio.enabled": False, "speculative.drafter": "none"})
    with run_server(cfg, tiny_backend) as addr:
        before = ready_spare()  # readied at start-up, before any request
        done = asyncio.run(one_response(str(addr)))
        assert done["response"]["status"] in ("completed", "incomplete")
        after = ready_spare()
        assert after is not before  # the conversation took the first; the idle hook made another
