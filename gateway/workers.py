"""Worker threads for CPU work on client input (grammar compilation): they yield the cores to decoding.

On a small machine the decode threads use every core, so any other CPU work slows every running
response. Work a client's request brings (a schema to compile) runs at a
lower scheduling priority than the engine: a flood of such requests waits for idle CPU instead of
stretching other sessions' gaps between chunks. Linux schedules each thread on its own, so the
niceness is set on the worker thread alone; elsewhere nothing changes. Only for threads nothing
waits on synchronously: a thread the event loop blocks on must keep the loop's priority. A niced
thread that holds the GIL can still hold the loop back for a few scheduler slices (tens of ms); under
the schema floods of ``bench.abuse`` /health's p99 stayed under 100 ms.
"""

from __future__ import annotations

import contextlib
import os
import threading

NICE = 10  # added to the process's niceness: under full contention such a thread gets ~1/10 of a core


def yield_to_decoding(nice: int = NICE) -> None:
    """Thread initializer: this OS thread runs ``nice`` steps below the process's priority."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not permitted: run as is
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))


def niceness() -> int | None:
    """The calling thread's niceness (None where the OS does not say)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (OSError, AttributeError):
        return None
