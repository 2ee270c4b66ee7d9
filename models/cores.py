"""The process's CPU cores, shared between its compute threads: a Whisper pass borrows one from the LLM,
other work yields to decoding.

llama.cpp's threads meet at a barrier inside every step. With Whisper's threads on the same cores,
a step waits for a thread the OS is not running: on 2 cores, four people speaking at once got
their first reply text after 0.83 s (median) and 1.19 s (max) with the LLM and Whisper on 2
threads each, and after 0.54 s and 0.70 s with one thread each (``bench voices``). Giving the LLM
one thread always would cost a lone text user's decode speed, so a pass says it is running
(``lend``) and the LLM steps on fewer threads (``LlamaCppBackend`` asks ``threads`` before every
``llama_decode``) until it ends. Thread-safe; the count is read without a lock (a stale read costs
one step at the old thread count).

Work that can wait (a schema to compile, an image to read) borrows nothing: its thread runs at a
lower priority (``yield_to_decoding``), so while a response decodes it gets what the LLM's threads
leave, and all of a core when nothing decodes. Linux schedules each thread on its own, so the
niceness is set on that OS thread alone; elsewhere nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

NICE = 10  # added to the process's niceness: under full contention such a thread gets ~1/10 of a core


class Cores:
    def __init__(self) -> None:
        self._lent = 0
        self._lock = threading.Lock()

    @property
    def lent(self) -> int:
        """Cores other compute threads are using now."""
        return self._lent

    def threads(self, configured: int) -> int:
        """The threads a compute pool configured for ``configured`` should step on now (at least one)."""
        return max(1, configured - self._lent)

    @contextmanager
    def lend(self, n: int = 1) -> Iterator[None]:
        """``n`` cores are busy with something else while the block runs."""
        with self._lock:
            self._lent += n
        try:
            yield
        finally:
            with self._lock:
                self._lent -= n


CORES = Cores()  # one process, one set of cores


def yield_to_decoding(nice: int = NICE) -> None:
    """Thread initializer: this OS thread runs ``nice`` steps below the process's priority (for good:
    only for threads of its own pool)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not permitted: run as is
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))


def niceness() -> int | None:
    """The calling thread's niceness (None where the OS does not say)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (OSError, AttributeError):
        return None
