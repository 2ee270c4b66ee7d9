"""Big text frames parsed in a process of their own, so that they cannot stall the event loop.

A thread is not enough: the depth scan's ``bytes.translate`` / numpy passes and pydantic's
``validate_json`` are single C calls that hold the GIL for their whole length (tens of ms for a
15 MB frame on a loaded 2-core box), and while they run the loop thread cannot take the GIL back
(``bench/bigframes_bench.py``). Here the frame crosses a pipe as raw UTF-8 (``send_bytes`` writes the
buffer as it is, with the GIL released during each write) and the parsed event, or the
``ProtocolError`` it raised, comes back pickled: the loop's process only pays one encode.

The workers start on the first big frame (a server that never gets one never starts them) as
``python -m gateway.realtime.bigframes``: not forked (the gateway runs threads: the engine, the
tokenizer), and not through ``multiprocessing``'s spawn, which re-runs the parent's ``__main__``
(a script that starts a server at import would start another). A worker reads EOF and exits when
the gateway closes the pipe or dies; one that dies is replaced on the next frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import astuple, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from models import schema_budget

from . import protocol as p

# A worker's CPU priority below the gateway's: on a busy box a big frame's parse waits, not the event
# loop that streams everyone's deltas (the parse is a big sender's cost: let it be the one to wait)
NICE = 10
PIPE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ParseLimits:
    """What ``LiveSession.parse`` checks; fixed for a server's life, so a worker gets it once."""

    max_depth: int
    max_item_chars: int
    max_instructions_chars: int

    @classmethod
    def of(cls, limits: Any) -> ParseLimits:
        """From ``config.limits`` (``gateway.core.config.LimitsConfig``)."""
        return cls(limits.max_json_depth, limits.max_item_text_chars, limits.max_instructions_chars)


def parse_checked(raw: str | bytes, limits: ParseLimits) -> Any:
    """A client event, or the ``ProtocolError`` it raised (as ``LiveSession.parse``; pure)."""
    try:
        ev = p.parse(raw, limits.max_depth)
        p.check_sizes(ev, limits.max_item_chars, limits.max_instructions_chars)
        check_schema_budget(ev)
        return ev
    except p.ProtocolError as exc:
        return exc


def check_schema_budget(ev: Any) -> None:
    """Tools of a ``session.update`` / ``response.create`` within ``models.schema_budget``, checked
    here (in the parse process, for a big frame) before the session copies and re-validates them
    on the event loop; else ``ProtocolError`` naming the field."""
    if isinstance(ev, p.SessionUpdate):
        where, tools = "session", ev.session.tools
    elif isinstance(ev, p.ResponseCreate) and ev.response is not None:
        where, tools = "response", ev.response.tools
    else:
        return
    schemas = [
        (f"{where}.tools[{i}].parameters", t.parameters)
        for i, t in enumerate(tools or [])
        if isinstance(t, p.FunctionTool) and t.parameters
    ]
    try:
        schema_budget.check(schemas, schema_budget.SchemaBudget(), len(tools or []), f"{where}.tools")
    except schema_budget.TooComplex as exc:
        raise p.ProtocolError("invalid_value", exc.message, ev.event_id, exc.param) from None


def _serve(frames: Connection, results: Connection, limits: ParseLimits) -> None:  # a worker's main
    while True:
        try:
            raw = frames.recv_bytes()
        except (EOFError, OSError):  # the gateway closed its end (or exited): so do we
            return
        results.send(parse_checked(raw, limits))


class _FrameWorker:
    def __init__(self, limits: ParseLimits):
        frames_r, frames_w = os.pipe()  # gateway → worker: frames
        results_r, results_w = os.pipe()  # worker → gateway: what each one parsed to
        for fd in (frames_w, results_w):  # 16 writes of 1 MiB for a 15 MB frame, not 240 of 64 KiB
            with contextlib.suppress(AttributeError, OSError):  # Linux only; capped by fs.pipe-max-size
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        root = str(Path(__file__).resolve().parents[2])  # this checkout's gateway, not another install's
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        args = [str(frames_r), str(results_w), *map(str, astuple(limits))]
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.realtime.bigframes", *args], pass_fds=(frames_r, results_w), env=env
            )
        finally:
            os.close(frames_r)
            os.close(results_w)
        self.frames = Connection(frames_w, readable=False)
        self.results = Connection(results_r, writable=False)

    def call(self, raw: bytes) -> Any:
        self.frames.send_bytes(raw)  # written from the buffer itself, the GIL released during each write
        return self.results.recv()

    def close(self) -> None:
        self.frames.close()  # the worker reads EOF and exits
        self.results.close()
        try:
            self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(2.0)


class FrameParser:
    """``await parse(text)``: ``LiveSession.parse`` in one of ``workers`` processes, in the order
    each caller awaits (a socket's reader awaits one frame at a time, so its frames keep their order)."""

    def __init__(self, limits: ParseLimits, workers: int = 1):
        self.limits = limits
        self._workers = max(1, workers)
        self._idle: queue.SimpleQueue[_FrameWorker | None] = queue.SimpleQueue()  # None: a slot to start one in
        for _ in range(self._workers):
            self._idle.put(None)
        self._all: set[_FrameWorker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._slots: asyncio.Semaphore | None = None  # made on first use, in the server's loop

    async def parse(self, text: str | bytes) -> Any:
        """``text``: the frame, or its UTF-8 left undecoded by the WebSocket layer (``gateway.core.ws_frames``)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._workers)
        async with self._slots:  # frames beyond the workers wait here, not on the shared to_thread pool's threads
            return await asyncio.to_thread(self._call, text)

    def _call(self, text: str | bytes) -> Any:  # on a worker thread: the pipe I/O blocks (with the GIL released)
        raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        worker = self._idle.get()  # waits while every worker is busy
        try:
            for attempt in (1, 2):  # a worker found dead (killed, out of memory) is replaced, once
                if worker is None:
                    worker = self._start()
                try:
                    return worker.call(raw)
                except (EOFError, OSError):
                    self._forget(worker)
                    worker = None
                    if attempt == 2:  # this frame killed a fresh one too: it costs this frame (server_error)
                        raise
            raise AssertionError("unreachable")
        finally:
            self._idle.put(worker)

    def _start(self) -> _FrameWorker:
        with self._lock:
            if self._closed:
                raise RuntimeError("the frame parser is closed")
            w = _FrameWorker(self.limits)
            self._all.add(w)
            return w

    def _forget(self, worker: _FrameWorker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.close()

    @property
    def processes(self) -> int:
        """Worker processes running now (0 until the first big frame)."""
        with self._lock:
            return sum(w.proc.poll() is None for w in self._all)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._all = list(self._all), set()
        for w in workers:
            w.close()


if __name__ == "__main__":  # a worker: python -m gateway.realtime.bigframes FRAMES_FD RESULTS_FD DEPTH ITEM INSTR
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the gateway: it closes our pipe instead
    os.nice(NICE)
    fd_in, fd_out, *caps = map(int, sys.argv[1:])
    _serve(Connection(fd_in, writable=False), Connection(fd_out, readable=False), ParseLimits(*caps))
