"""The engine for a remote model: an ``EngineClient`` (``models.engine_client``) like ``models.engine``'s.

A local engine interleaves responses on one thread because they share one model; a remote
engine's responses share nothing but a connection pool, and each spends its time blocked on a
socket read. So each running response gets a worker thread of its own (``max_running`` of them;
past that, FIFO waiting up to ``max_waiting``, then ``EngineBusy``), and the gateway above
submits jobs and receives ``JobEvents`` exactly as it does for a local model.

Cancel is a priority path: ``RemoteHandle.cancel()`` (any thread) ends the response at once
(its ``done`` is delivered from the cancelling thread, no wait for the worker) and shuts the
upstream socket, which wakes the worker's read and tells the engine to stop generating.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backend import KVState
from .decode_ports import TokenConstraint
from .engine_client import Admission, JobHandle, Sink, deliver, run_call
from .remote import RemoteJob, RemoteModel, shut, stream_job
from .sampling import SamplingParams
from .scheduler import SchedulerConfig

log = logging.getLogger("stream_omni.remote")


@dataclass(eq=False)
class RemoteHandle(JobHandle[RemoteJob]):
    """A streamed response, whose cancel ends it at once."""

    @property
    def remote(self) -> RemoteJob:
        return self.job

    def cancel(self) -> None:
        self.cancelled.set()
        job = self.remote
        with job.lock:  # the worker delivers (and closes its socket) under this lock too
            events = job.cancel()
            if events.done is not None:
                deliver(self.sink, events, log)  # nothing of this response follows its done
            # shut the engine's stream; before the engine's first byte there is no socket yet: the
            # worker closes the connection as soon as that byte arrives (stream_job's _attach)
            shut(job.sock)


class RemoteEngine(Admission[RemoteHandle]):
    """The ``EngineClient`` (models/engine_client.py) of a remote engine: messages in, text streamed back."""

    tokenizes = False  # the engine takes messages and applies its own template
    drafts_itself = True  # speculative decoding (or none) is the engine's
    streams_text = True

    def __init__(self, max_running: int = 4, max_waiting: int = 16, name: str = "remote"):
        # max_running: responses streaming from the engine at once, a worker thread each
        super().__init__(max_running, max_waiting)
        self.model: RemoteModel | None = None  # what ``job`` streams from (``attach``)
        self._workers = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True) for i in range(max_running)
        ]
        for t in self._workers:
            t.start()

    def submit(self, job: Any, sink: Sink) -> RemoteHandle:
        if not isinstance(job, RemoteJob):  # (typed Any as EngineClient.submit: a job of the other engine)
            raise TypeError(f"a remote engine streams RemoteJobs, not {type(job).__name__}")
        return self._admit_new(lambda i: RemoteHandle(job, sink, i))

    def call(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args)`` now on a thread of its own (start-up work such as connecting to the engine)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        threading.Thread(target=run_call, args=(fut, fn, args), name="remote-call", daemon=True).start()
        return fut

    def on_idle(self, fn: Callable[[], bool] | None) -> None:
        """Nothing to warm: the engine's cache is the engine's."""

    def attach(self, model: RemoteModel) -> None:
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
    ) -> RemoteJob:
        """``messages`` sent to the engine, which keeps the cache (``state``) and tokenizes (``prompt``)."""
        if constraint is not None:
            raise ValueError("structured output needs local decoding")
        if self.model is None:
            raise RuntimeError("no model attached to this engine")
        return RemoteJob(self.model, messages, sampling, sched)

    def ready(self) -> bool:
        """Has the engine answered lately (else: does it answer GET /models now)? Blocks on a probe."""
        return self.model is not None and self.model.ready()

    def running_jobs(self) -> list[RemoteJob]:
        """The responses streaming now (for introspection: tests, debugging)."""
        with self._cv:
            return [h.remote for h in self._running]

    def close(self, timeout: float = 5.0) -> None:
        """Cancel every response, stop the workers, then close the connection pool to the engine."""
        super().close(timeout)
        if self.model is not None:
            self.model.close()

    def _join(self, timeout: float) -> None:
        for t in self._workers:
            t.join(timeout / max(len(self._workers), 1))

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._waiting and not self._stop:
                    self._cv.wait()
                if self._stop and not self._waiting:
                    return
                h = self._waiting.popleft()
                self._running.append(h)
            try:
                if not h.cancelled.is_set():
                    stream_job(h.remote, functools.partial(deliver, h.sink, log=log), h.cancelled)
            finally:
                with self._cv:
                    self._running.remove(h)
