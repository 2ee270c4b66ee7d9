"""models.engine_client: both engines are EngineClients; the shared admission and job lifecycle,
driven by fakes (no model, no sockets, no threads of their own)."""

from __future__ import annotations

import concurrent.futures
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from models.engine import Engine
from models.engine_client import Admission, EngineBusy, EngineClient, JobHandle, run_call
from models.lifecycle import Done, JobEvents, JobLifecycle
from models.remote import RemoteConfig, RemoteJob, RemoteModel
from models.remote_engine import RemoteEngine
from models.sampling import SamplingParams
from models.scheduler import ChunkScheduler, SchedulerConfig

ROOT = Path(__file__).resolve().parents[2]


class ManualEngine(Admission[JobHandle[str]]):
    """An EngineClient whose queue moves only when the test says so."""

    tokenizes = False
    drafts_itself = True
    streams_text = True

    def __init__(self, max_running: int, max_waiting: int):
        super().__init__(max_running, max_waiting)
        self.model: Any = None

    def submit(self, job: Any, sink: Callable[[JobEvents], None]) -> JobHandle[str]:
        return self._admit_new(lambda i: JobHandle(job, sink, i))

    def call(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        run_call(fut, fn, args)
        return fut

    def on_idle(self, fn: Callable[[], bool] | None) -> None:
        pass

    def attach(self, model: Any) -> None:
        self.model = model

    def job(self, state: Any, messages: list[dict[str, str]], *args: Any, **kw: Any) -> str:
        return messages[-1]["content"]

    def ready(self) -> bool:
        return self.model is not None

    def start_next(self) -> None:
        with self._cv:
            self._running.append(self._waiting.popleft())


def test_both_engines_and_the_fake_are_engine_clients():
    local, remote = Engine(max_running=1), RemoteEngine(max_running=1)
    try:
        for engine in (local, remote, ManualEngine(1, 1)):
            assert isinstance(engine, EngineClient)
        assert (local.tokenizes, local.drafts_itself, local.streams_text) == (True, False, False)
        assert (remote.tokenizes, remote.drafts_itself, remote.streams_text) == (False, True, True)
        assert local.ready() and not remote.ready()  # a remote engine answers for its model: none attached yet
    finally:
        local.close()
        remote.close()


def test_admission_busy_past_the_limits_depth_and_close():
    eng = ManualEngine(max_running=1, max_waiting=2)
    got: list[JobEvents] = []
    first = eng.submit("a", got.append)
    assert eng.depth == (0, 1)
    eng.start_next()
    assert eng.depth == (1, 0)
    waiting = [eng.submit("b", got.append), eng.submit("c", got.append)]
    assert eng.depth == (1, 2)
    with pytest.raises(EngineBusy, match="too many responses queued"):
        eng.submit("d", got.append)
    assert eng.depth == (1, 2)  # a refused job holds no place
    assert [h.id for h in (first, *waiting)] == [1, 2, 3]
    eng.close()
    assert all(h.cancelled.is_set() for h in (first, *waiting))  # running and waiting alike
    with pytest.raises(EngineBusy, match="shutting down"):
        eng.submit("e", got.append)


def test_call_hands_back_the_result_or_the_error():
    eng = ManualEngine(1, 1)
    assert eng.call(lambda a, b: a + b, 2, 3).result() == 5
    with pytest.raises(ZeroDivisionError):
        eng.call(lambda: 1 / 0).result()


def test_services_ask_the_engine_not_its_type():
    from gateway.core.config import load_config
    from gateway.core.services import Services
    from gateway.realtime.defaults import session_defaults

    eng = ManualEngine(1, 1)
    backend = types.SimpleNamespace(name="m", max_context=64)
    svc = Services(load_config(None), backend, eng, None)  # type: ignore[arg-type]
    assert svc.tokenizes is False
    hi = [{"role": "user", "content": "hi"}]
    assert svc.decode_job(None, hi, svc.sampling_defaults, svc.scheduler_config()) == "hi"  # type: ignore[arg-type]
    assert session_defaults(svc).count_tokens is None  # nothing to count with here
    eng.tokenizes, eng.streams_text = True, False  # type: ignore[misc]
    assert svc.tokenizes is True


def test_a_remote_engine_builds_remote_jobs_for_its_model_only():
    eng = RemoteEngine(max_running=1)
    model = RemoteModel(RemoteConfig(base_url="http://127.0.0.1:9/v1"), "m")  # never connects
    try:
        with pytest.raises(RuntimeError):
            eng.job(None, [], SamplingParams(), SchedulerConfig())  # type: ignore[arg-type]
        eng.attach(model)
        job = eng.job(None, [{"role": "user", "content": "hi"}], SamplingParams(), SchedulerConfig())  # type: ignore[arg-type]
        assert isinstance(job, RemoteJob) and job.model is model
        with pytest.raises(ValueError, match="local decoding"):
            eng.job(None, [], SamplingParams(), SchedulerConfig(), constraint=object())  # type: ignore[arg-type]
    finally:
        eng.close()  # closes the attached model's client too
    assert model.client.is_closed


def test_the_gateway_holds_no_isinstance_branch_on_the_backend():
    for path in (ROOT / "gateway").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"isinstance\([^)]*Remote(Model|Engine|Job)\b", text), path


class WordJob(JobLifecycle):
    """A job of the shared lifecycle: each fed word a token."""

    def __init__(self, sched: SchedulerConfig):
        self.words: list[str] = []
        self.ticks = 0.0
        self._start(ChunkScheduler(sched, lambda ids: "".join(self.words[i] for i in ids)), self._tick)

    def _tick(self) -> float:
        self.ticks += 1.0
        return self.ticks

    def feed(self, word: str) -> JobEvents:
        self.words.append(word)
        chunks = self.scheduler.feed([len(self.words) - 1], self.clock())
        self._note_chunks(chunks)
        return JobEvents(chunks=chunks)

    def metrics(self) -> dict[str, Any]:
        return {"chunks": self.n_chunks, "first": self.t_first}


def test_the_lifecycle_ends_once_flushing_unless_cancelled_or_failed():
    sched = SchedulerConfig.for_strategy("quality")  # holds text back for whole sentences
    j = WordJob(sched)
    shown = [c for w in ("Hello", " there") for c in j.feed(w).chunks]
    end = j._end(Done("stop", {"extra": 1}))
    assert "".join(c.text for c in shown + end.chunks) == "Hello there"  # what was held back comes out
    assert end.done is not None and end.done.metrics["extra"] == 1 and end.done.metrics["chunks"] == j.n_chunks
    assert j.finished and j._end(Done("stop", {})) == JobEvents()  # once only
    for reason in ("cancelled", "error"):
        k = WordJob(sched)
        k.feed("Hello")
        out = k._end(Done(reason, {}))
        assert out.chunks == [] and out.done is not None and out.done.reason == reason
