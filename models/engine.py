"""One worker thread that owns the model and advances every running response one step at a time.

Continuous batching: each engine step gathers the next forward of every running response (a
decode token, a draft-verify block, or a piece of a new prompt) into ONE ``Backend.forward_batch``
call, then hands each response its rows (``DecodeJob.plan`` / ``complete``). Prompts go in pieces
of at most ``prefill_chunk`` tokens per step in total (FIFO), so running streams keep flowing while
a newcomer is prefilled. Every running response advances once per step, so none starves, and any
stops within one step of a cancel without disturbing the others. Each response's drafting policy
weighs its verify block against the batch's step (``models.draft_policy``; the engine reports
every decode step's sequences, tokens and seconds to it through ``observe_step``); past
``draft_max_batch`` responses, and while any prompt is going in, nobody drafts at all. Jobs
without ``plan`` (or not ``batchable``: beam search) step alone once per engine step. Past ``max_running``
jobs wait in FIFO order; past ``max_waiting`` ``submit`` raises ``EngineBusy`` at once.

Sync model code meets asyncio in exactly one place, outside this package: the gateway's
``AsyncSink`` (gateway/core/engine_events.py) hands each event to the event loop with ``call_soon_threadsafe``.

Every model call happens on the worker thread, including start-up work (``call``): llama.cpp
runs its kernels on an OpenMP team per calling thread, and once a second thread has one, the
process has more OpenMP threads than cores and libgomp throttles its spin-waits — measured here,
a llama.cpp decode step went from ≈ 10 ms to ≈ 20 ms for the life of the process.

``on_idle(fn)`` gives the worker something to do, in short pieces, once it runs out of work (the
backend readies the next conversation's cache there, off every response's critical path).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from .backend import Backend, KVState, run_batch
from .decode import DecodeJob, Done, Forward, JobEvents
from .decode_ports import TokenConstraint
from .engine_client import Admission, EngineBusy, JobHandle, Sink, deliver, run_call
from .sampling import SamplingParams
from .scheduler import SchedulerConfig

log = logging.getLogger("stream_omni.engine")


class Job(Protocol):
    """What the engine runs (``DecodeJob``): a response that plans each step's forward, or steps alone."""

    backend: Backend  # jobs on the same backend share one batched forward per step
    state: KVState  # the conversation's cache the planned tokens go into

    @property
    def finished(self) -> bool:
        """It has ended: the engine drops it after this step."""
        ...

    def plan(
        self, load: int = 0, prefill_budget: int | None = None, draft: bool = True, prefill_piece: int | None = None
    ) -> Forward | None:
        """This step's tokens to forward (None: nothing now); ``load``: tokens others put in the batch."""
        ...

    def complete(self, rows: np.ndarray, seconds: float = 0.0) -> JobEvents:
        """The logits rows of the planned forward → this step's events."""
        ...

    def step(self) -> JobEvents:
        """A whole step alone (beam search, or a job the batch could not carry)."""
        ...

    def cancel(self) -> JobEvents:
        """End now; the events that close the response."""
        ...


Handle = JobHandle[Job]


class Engine(Admission[Handle]):
    """The local ``EngineClient`` (models/engine_client.py): token ids in, decoded here."""

    tokenizes = True
    drafts_itself = False  # drafting is set up here (models.speculative), per response
    streams_text = False

    def __init__(
        self,
        max_running: int = 16,
        max_waiting: int = 16,
        name: str = "engine",
        prefill_chunk: int = 128,
        draft_max_batch: int = 16,
    ):
        super().__init__(max_running, max_waiting)  # max_running: jobs batched into each step
        self.prefill_chunk = max(1, prefill_chunk)  # prompt tokens fed per engine step, all jobs together
        self.draft_max_batch = draft_max_batch  # past this many batched jobs nobody drafts (below: each job's policy)
        self._calls: deque[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._steps = 0  # decode/verify forwards timed so far (an id per step for observe_step)
        self._idle: Callable[[], bool] | None = None
        self._idle_due = False  # work was done since the idle hook last ran
        self.model: Backend | None = None  # what ``job`` builds responses of (``attach``)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ any thread

    def submit(self, job: Job, sink: Sink) -> Handle:
        return self._admit_new(lambda i: Handle(job, sink, i))

    def call(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args)`` on the worker thread, between decode steps (model loading, probes)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._cv:
            if self._stop:
                raise EngineBusy("engine is shutting down")
            self._calls.append((fut, fn, args))
            self._cv.notify()
        return fut

    def on_idle(self, fn: Callable[[], bool] | None) -> None:
        """Run ``fn`` on the worker thread when it runs out of work (now too, if it has none), again
        while it returns True (more to do) and no work has come. A response that arrives meanwhile
        waits for the call in progress, so each should be short; errors are logged."""
        with self._cv:
            self._idle, self._idle_due = fn, fn is not None
            self._cv.notify()

    def attach(self, model: Backend) -> None:
        self.model = model

    def job(
        self,
        state: KVState,
        messages: list[dict[str, str]],
        sampling: SamplingParams,
        sched: SchedulerConfig,
        prompt: list[int] | None = None,
        drafting: tuple[Any, Any] = (None, None),
        constraint: TokenConstraint | None = None,
    ) -> DecodeJob:
        """``messages`` through the model's chat template (unless ``prompt`` has them), decoded on ``state``."""
        backend = self.model
        if backend is None:
            raise RuntimeError("no model attached to this engine")
        ids = backend.chat_tokens(messages) if prompt is None else prompt
        return DecodeJob(backend, state, ids, sampling, sched, *drafting, constraint=constraint)

    def ready(self) -> bool:
        return True  # the model is in this process: loaded is ready

    def _join(self, timeout: float) -> None:
        self._thread.join(timeout)

    # ------------------------------------------------------------------ worker thread

    def _admit(self) -> None:
        while self._waiting and len(self._running) < self.max_running:
            h = self._waiting.popleft()
            state = getattr(h.job, "state", None)
            if state is not None:  # one job per conversation cache: a newer one supersedes
                for old in self._running:
                    if getattr(old.job, "state", None) is state:
                        old.cancel()
            self._running.append(h)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while (hook := self._idle if self._idle_due else None) is None and self._no_work():
                    self._cv.wait()
                hook = hook if self._no_work() else None
                call = self._calls.popleft() if self._calls else None
            if hook is not None:
                more = self._run_idle(hook)  # more to do: called again while still idle
                with self._cv:
                    self._idle_due = more or self._idle is not hook  # (a hook set meanwhile is due)
                continue
            if call is not None:
                self._idle_due = True
                run_call(*call)
                continue
            with self._cv:
                if self._stop and not self._running and not self._waiting:
                    return
                self._admit()
                # cancelled jobs leave first, before anything else touches their cache
                for h in [h for h in self._running if h.cancelled.is_set()]:
                    self._running.remove(h)
                    self._deliver(h, h.job.cancel())
                running = list(self._running)
            if not running:
                continue
            self._step(running)
            self._idle_due = True
            with self._cv:
                for h in running:
                    if h.job.finished and h in self._running:
                        self._running.remove(h)

    def _step(self, running: list[Handle]) -> None:
        """One engine step: every batchable job's next forward in one ``forward_batch`` per backend
        (prefill pieces FIFO within ``prefill_chunk`` tokens), then each other job steps once."""
        batched = [h for h in running if getattr(h.job, "batchable", False)]
        # the other sequences each job's forward shares (those planned before it that forward, and
        # those not planned yet): each holds a row of the step's first compute, while a verify or a
        # prompt block runs as a compute of its own (models.draft_policy), so the others' drafts do
        # not change what a job's own drafts cost
        later = len(batched)  # jobs not planned yet
        planned = 0  # jobs planned so far this step that forward
        # nobody drafts while a prompt goes in: a verify block lengthens the step that its first text waits for
        draft = len(batched) <= self.draft_max_batch and not any(
            getattr(h.job, "prompt_pending", False) for h in batched
        )
        budget = self.prefill_chunk
        groups: dict[int, list[tuple[Handle, Forward]]] = {}
        for h in batched:
            try:
                later -= 1
                load = planned + later
                fw = h.job.plan(load=load, prefill_budget=budget, draft=draft, prefill_piece=self.prefill_chunk)
            except Exception as exc:
                self._fail(h, exc)
                continue
            if fw is None:
                if getattr(h.job, "prefilling", False):
                    budget = 0  # its piece did not fit: FIFO, no later prompt goes before it
                continue
            if fw.prefill:
                budget -= len(fw.tokens)
            planned += 1
            groups.setdefault(id(h.job.backend), []).append((h, fw))
        for group in groups.values():
            self._forward_group(group)
        for h in running:
            if h not in batched and not h.job.finished and not h.cancelled.is_set():
                try:
                    events = h.job.step()
                except Exception as exc:  # a model error ends this response only
                    self._fail(h, exc)
                    continue
                self._deliver(h, events)

    def _forward_group(self, group: list[tuple[Handle, Forward]]) -> None:
        backend = group[0][0].job.backend
        items = [(h.job.state, fw.tokens, fw.n_logits) for h, fw in group]
        t0 = time.perf_counter()
        results: list[np.ndarray | Exception]
        try:
            results = list(run_batch(backend, items))
        except Exception:  # all-or-nothing: nothing changed; one by one finds the response at fault
            results = []
            for item in items:
                try:
                    results.append(run_batch(backend, [item])[0])
                except Exception as exc:
                    results.append(exc)
        took = time.perf_counter() - t0
        seconds = took if len(items) == 1 else 0.0  # a shared step times no one job
        # a decode/verify step (no prompt piece, no failure): data for the drafting cost curve
        if not any(fw.prefill for _, fw in group) and not any(isinstance(r, Exception) for r in results):
            self._steps += 1
            tokens = sum(len(fw.tokens) for _, fw in group)
            for h, _ in group:
                observe = getattr(h.job, "observe_step", None)
                if observe is not None:
                    observe(tokens, took, (id(self), self._steps), len(group))
        for (h, _), rows in zip(group, results, strict=True):
            if isinstance(rows, Exception):
                self._fail(h, rows)
                continue
            try:
                events = h.job.complete(rows, seconds)
            except Exception as exc:
                self._fail(h, exc)
                continue
            self._deliver(h, events)

    def _fail(self, h: Handle, exc: Exception) -> None:
        """A model error ends this response only: it leaves the running jobs, its sink gets the error."""
        log.error("decode step failed: %s", "".join(traceback.format_exception_only(exc)).strip())
        with self._cv:
            if h in self._running:
                self._running.remove(h)
        self._deliver(h, JobEvents(done=Done("error", {"error": type(exc).__name__})))

    def _no_work(self) -> bool:
        return not self._stop and not self._running and not self._waiting and not self._calls

    @staticmethod
    def _run_idle(hook: Callable[[], bool]) -> bool:
        try:
            return bool(hook())
        except Exception:  # the worker goes on; the hook is tried again after the next work
            log.exception("idle hook failed")
            return False

    @staticmethod
    def _deliver(h: Handle, events: JobEvents) -> None:
        # a step that shows nothing (no text, request, call or end) wakes nobody up
        if events.chunks or events.requests or events.tool_calls or events.done is not None:
            deliver(h.sink, events, log)


__all__ = ["DecodeJob", "Engine", "EngineBusy", "Handle", "Job"]
