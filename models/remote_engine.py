"""The engine for a remote model: the same ``submit``/``Handle``/sink contract as ``models.engine``.

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
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from .decode import JobEvents
from .engine import EngineBusy, Handle, Job
from .remote import RemoteJob, shut, stream_job

log = logging.getLogger("stream_omni.remote")


@dataclass(eq=False)
class RemoteHandle(Handle):
    """A streamed response: the engine's ``Job`` protocol is for local decoding, so the remote job
    rides in ``job`` and is read back through ``remote``."""

    @property
    def remote(self) -> RemoteJob:
        return cast(RemoteJob, self.job)

    def cancel(self) -> None:
        self.cancelled.set()
        job = self.remote
        with job.lock:  # the worker delivers (and closes its socket) under this lock too
            events = job.cancel()
            if events.done is not None:
                _deliver(self.sink, events)  # nothing of this response follows its done
            # shut the engine's stream; before the engine's first byte there is no socket yet: the
            # worker closes the connection as soon as that byte arrives (stream_job's _attach)
            shut(job.sock)


class RemoteEngine:
    def __init__(self, max_running: int = 4, max_waiting: int = 16, name: str = "remote"):
        self.max_running = max_running  # responses streaming from the engine at once
        self.max_waiting = max_waiting  # responses queued behind them before EngineBusy
        self._waiting: deque[RemoteHandle] = deque()
        self._running: set[RemoteHandle] = set()
        self._cv = threading.Condition()
        self._ids = itertools.count(1)
        self._stop = False
        self._workers = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True) for i in range(max_running)
        ]
        for t in self._workers:
            t.start()

    def submit(self, job: Any, sink: Callable[[JobEvents], None]) -> RemoteHandle:
        if not isinstance(job, RemoteJob):  # (typed Any like Engine.submit: the gateway holds either engine)
            raise TypeError(f"a remote engine streams RemoteJobs, not {type(job).__name__}")
        with self._cv:
            if self._stop:
                raise EngineBusy("engine is shutting down")
            if len(self._running) >= self.max_running and len(self._waiting) >= self.max_waiting:
                raise EngineBusy("too many responses queued")
            handle = RemoteHandle(cast(Job, job), sink, next(self._ids))
            self._waiting.append(handle)
            self._cv.notify()
        return handle

    def call(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args)`` now on a thread of its own (start-up work such as connecting to the engine)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # the caller sees it
                fut.set_exception(exc)

        threading.Thread(target=run, name="remote-call", daemon=True).start()
        return fut

    def on_idle(self, fn: Callable[[], bool] | None) -> None:
        """Nothing to warm: the engine's cache is the engine's."""

    def running_jobs(self) -> list[RemoteJob]:
        """The responses streaming now (for introspection: tests, debugging)."""
        with self._cv:
            return [h.remote for h in self._running]

    @property
    def depth(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._cv:
            return len(self._running), len(self._waiting)

    def close(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._stop = True
            handles = [*self._running, *self._waiting]
            self._cv.notify_all()
        for h in handles:
            h.cancel()
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
                self._running.add(h)
            try:
                if not h.cancelled.is_set():
                    stream_job(h.remote, functools.partial(_deliver, h.sink), h.cancelled)
            finally:
                with self._cv:
                    self._running.discard(h)


def _deliver(sink: Callable[[JobEvents], None], events: JobEvents) -> None:
    try:
        sink(events)
    except Exception:  # a closed loop must not kill the worker
        log.exception("event sink failed")
