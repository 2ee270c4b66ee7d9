"""What the gateway holds as its engine: ``EngineClient``, and the admission both engines share.

The gateway never asks which engine it holds. A local ``models.engine.Engine`` decodes token ids
on one worker thread; a ``models.remote_engine.RemoteEngine`` streams text from a remote
OpenAI-compatible engine on a thread per response. Both take a job with ``submit`` and hand its
``JobEvents`` to a sink from their own threads, both run start-up work with ``call``, and both
answer the questions whose answers differ between them (``tokenizes``, ``drafts_itself``,
``streams_text``, ``ready``) and build their own jobs (``job``).

Contract:

* ``submit(job, sink)`` returns a ``Handle`` at once; past ``max_running`` running and
  ``max_waiting`` waiting it raises ``EngineBusy`` instead (and after ``close``). ``sink`` is
  called from an engine thread, never after the job's ``done``; ``Handle.cancel()`` is safe from
  any thread and idempotent, and the job's ``done`` (``cancelled``) follows it.
* ``call(fn, *args)`` runs ``fn`` where the engine runs model code (the worker thread of a local
  engine) and returns a ``Future``; ``on_idle(fn)`` gives a local worker something to do when it
  has no work (an engine with nothing to warm ignores it).
* ``attach(model)`` is given the model loaded with ``call`` (once, at start-up); ``job(...)``
  builds one response for it, ``ready()`` says whether it can serve now, ``close()`` cancels every
  job, stops the threads and lets go of the model.
* ``depth`` is (running, waiting), read under the engine's lock.

``Admission`` holds what both engines do alike: the running and waiting lists, ``EngineBusy`` past
the limits or after ``close``, ``depth``, and ``close``'s cancelling. How a job then runs is each
engine's own (steps on one thread, or a stream per thread).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from .backend import KVState
    from .decode_ports import TokenConstraint
    from .lifecycle import JobEvents
    from .sampling import SamplingParams
    from .scheduler import SchedulerConfig

J = TypeVar("J")

Sink = Callable[["JobEvents"], None]


class EngineBusy(Exception):
    """The wait queue is full (or the engine is shutting down)."""


@dataclass(eq=False)
class JobHandle(Generic[J]):
    """A submitted job. ``cancel()`` is safe from any thread and idempotent."""

    job: J
    sink: Sink
    id: int = 0
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()


Handle = JobHandle[Any]  # as the gateway holds one: of whichever engine's job
H = TypeVar("H", bound=JobHandle[Any])


@runtime_checkable
class EngineClient(Protocol):
    """The engine as the gateway drives it (see the module docstring for the contract)."""

    max_running: int  # jobs running at once
    max_waiting: int  # jobs queued behind them before EngineBusy

    def submit(self, job: Any, sink: Sink) -> Handle:
        """Queue ``job`` (one this engine's ``job`` built); its events go to ``sink``."""
        ...

    def call(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args)`` where this engine runs model code."""
        ...

    def on_idle(self, fn: Callable[[], bool] | None) -> None:
        """Work for the engine's idle time (True: more to do), or None."""
        ...

    @property
    def depth(self) -> tuple[int, int]:
        """(running, waiting)."""
        ...

    def close(self, timeout: float = 5.0) -> None:
        """Refuse new jobs, cancel every running and waiting one, stop, let go of the model."""
        ...

    def attach(self, model: Any) -> None:
        """The model loaded for this engine (at start-up, with ``call``)."""
        ...

    def job(
        self,
        state: KVState,
        messages: list[dict[str, str]],
        sampling: SamplingParams,
        sched: SchedulerConfig,
        prompt: list[int] | None = None,
        drafting: tuple[Any, Any] = (None, None),
        constraint: TokenConstraint | None = None,
    ) -> Any:
        """One response of the attached model to ``messages`` (``prompt``: them already tokenized).
        Raises ``ContextOverflow`` or ``ValueError`` (options this engine cannot honour)."""
        ...

    def ready(self) -> bool:
        """Can it serve now? (May ask a remote engine: not on the event loop.)"""
        ...

    @property
    def tokenizes(self) -> bool:
        """Prompts are token ids tokenized here with the model's tokenizer (chat templates, raw
        completions, token counts). False: the engine takes messages and tokenizes them itself."""
        ...

    @property
    def drafts_itself(self) -> bool:
        """Speculative decoding is the engine's own business: none is set up here."""
        ...

    @property
    def streams_text(self) -> bool:
        """Responses arrive as the engine's text deltas, each a unit as it comes (no ids to count):
        a first delta is worth showing at once (``SchedulerConfig.eager_first``)."""
        ...


class Admission(Generic[H]):
    """Admission both engines share: ``max_running`` running, then FIFO waiting up to
    ``max_waiting``, then ``EngineBusy``; ``depth``; and ``close``'s refusing and cancelling.
    Subclasses move handles from ``_waiting`` to ``_running`` on their threads, under ``_cv``,
    and join those threads in ``_join``."""

    def __init__(self, max_running: int, max_waiting: int):
        self.max_running = max_running
        self.max_waiting = max_waiting
        self._running: list[H] = []
        self._waiting: deque[H] = deque()
        self._cv = threading.Condition()
        self._ids = itertools.count(1)
        self._stop = False

    def _admit_new(self, make: Callable[[int], H]) -> H:
        """``make(id)`` queued to wait, or ``EngineBusy``."""
        with self._cv:
            if self._stop:
                raise EngineBusy("engine is shutting down")
            if len(self._running) >= self.max_running and len(self._waiting) >= self.max_waiting:
                raise EngineBusy("too many responses queued")
            handle = make(next(self._ids))
            self._waiting.append(handle)
            self._cv.notify()
        return handle

    @property
    def depth(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._cv:
            return len(self._running), len(self._waiting)

    def close(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._stop = True
            handles = [*self._running, *self._waiting]
            for h in handles:  # seen by the workers as soon as they wake
                h.cancelled.set()
            self._cv.notify_all()
        for h in handles:  # outside the lock: a remote handle delivers its done and shuts its socket
            h.cancel()
        self._join(timeout)

    def _join(self, timeout: float) -> None:
        """Wait up to ``timeout`` s in all for the engine's threads to end."""


def run_call(fut: concurrent.futures.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """``fut`` gets ``fn(*args)``'s result or exception (the calling thread goes on either way)."""
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn(*args))
    except BaseException as exc:  # the caller sees it
        fut.set_exception(exc)


def deliver(sink: Sink, events: JobEvents, log: logging.Logger) -> None:
    """``sink(events)``; a failing sink (a closed event loop) is logged, never kills the worker."""
    try:
        sink(events)
    except Exception:
        log.exception("event sink failed")
