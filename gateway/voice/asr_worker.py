"""The Whisper worker every voice session shares: ``asr_queue.PassQueue`` run on one thread; and voice seats.

Thin I/O around the pure queue: ``transcribe`` queues a pass and awaits its text; when the
worker thread is free, the queue's next batch runs there as one call (``transcribe_batch`` where
the engine has it, else pass by pass). Queue state is touched on the event loop only; the thread
only runs Whisper. A shed partial raises ``PassShed`` in its session.

Seats: past ``capacity`` voice sessions speaking at once, a new one is refused (``server_busy``)
rather than made to wait behind the others' passes; text sessions never take a seat. A seat is
held while its session speaks (``MediaInput`` asks on every frame of a server-VAD turn, and every
frame of a manual one): one that has not spoken for ``SEAT_IDLE_S`` (its turn answered, its socket
dropped) gives it up, and takes one again when it next speaks, if one is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from models.cores import CORES
from processors.asr import Transcriber, encoder_frames

from .asr_queue import Pass, PassKind, PassQueue, QueueConfig

if TYPE_CHECKING:
    from ..core.services import Services

log = logging.getLogger("stream_omni.asr")

FRAMES_PER_S = 100


# the gating passes of speakers who stop together must be back within this: the pause pass starts
# ≈ 0.1 s after the end of speech, and the reply's first text is due 1 s after it, less the LLM's
# first token and a partial call it may wait for. Capacity is how many passes one call does in it.
ASR_BUDGET_S = 0.6
SEAT_IDLE_S = 3.0  # a voice session not speaking this long gives its seat up (its turn is answered by then)
MAX_MEASURED = 64


def measure_capacity(asr: Transcriber, budget_s: float = ASR_BUDGET_S) -> int:
    """How many gating passes one Whisper call finishes within ``budget_s`` here: a warm-up pass, then
    one pass and a batch of two on a 2 s voiced clip, a straight line through them (blocking: ~3 passes)."""
    t = np.arange(2 * 16_000, dtype=np.float32) / 16_000
    # a vowel-like tone at syllable rate: enough for Whisper to decode a few tokens, like speech costs
    clip = (0.1 * np.sin(2 * np.pi * 180 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)
    batch = getattr(asr, "transcribe_batch", None)

    def run(n: int) -> float:
        t0 = time.perf_counter()
        if batch is not None:
            batch([clip] * n)
        else:
            for _ in range(n):
                asr.transcribe(clip)
        return time.perf_counter() - t0

    run(1)  # warm-up: the first call allocates
    one, two = run(1), run(2)
    per = max(two - one, 1e-3)  # each pass more in a batch
    fixed = max(one - per, 0.0)
    capacity = int((budget_s - fixed) // per)
    log.info("voice capacity: %d sessions (one pass %.0f ms, each more %.0f ms)", capacity, one * 1e3, per * 1e3)
    return min(max(capacity, 1), MAX_MEASURED)


THREAD_NAME = b"so-asr"  # the OS name of the worker thread and of Whisper's compute threads


def _os_thread_name(name: bytes = THREAD_NAME) -> None:
    """Name the calling thread for the OS (top -H, /proc), so the CPU Whisper takes can be told from the LLM's."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME (Linux)
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def whisper_threads_named() -> Iterator[None]:
    """Around loading Whisper: CTranslate2 starts its compute threads then, and they keep the name the
    loading thread had (a pool thread: its own name comes back afterwards)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "rb") as f:
            before = f.read().strip()
    except OSError:
        before = None
    _os_thread_name()
    try:
        yield
    finally:
        if before is not None:
            _os_thread_name(before)


class PassShed(Exception):
    """The queue dropped this partial pass before it ran (load, or a gating pass waited for it)."""


class AsrWorker:
    def __init__(
        self,
        asr: Transcriber,
        capacity: int,
        config: QueueConfig | None = None,
        metrics: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.asr = asr
        self.capacity = capacity  # voice sessions served at once (audio.max_concurrent_turns, or measured)
        self.queue = PassQueue(config)
        self.metrics = metrics  # gateway.core.metrics.Metrics, or None (tests, benches)
        self.clock = clock
        self._tickets = itertools.count(1)
        self._futures: dict[int, asyncio.Future[str]] = {}
        self._audio: dict[int, np.ndarray] = {}
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="asr", initializer=_os_thread_name)
        self._seats: dict[str, float] = {}  # session → when its last audio came

    # ------------------------------------------------------------------ seats

    def seat(self, session: str) -> bool:
        """Take (or keep) a voice seat for ``session``, which sent audio now: False when all are taken."""
        now = self.clock()
        if session not in self._seats and len(self._seats) >= self.capacity:
            for idle in [s for s, seen in self._seats.items() if now - seen > SEAT_IDLE_S]:
                del self._seats[idle]
            if len(self._seats) >= self.capacity:
                return False
        fresh = session not in self._seats
        self._seats[session] = now
        if fresh:
            self._gauge()
        return True

    def unseat(self, session: str) -> None:
        self._seats.pop(session, None)
        self._gauge()

    @property
    def seated(self) -> int:
        return len(self._seats)

    # ------------------------------------------------------------------ passes

    def submit(self, session: str, kind: PassKind, audio: np.ndarray) -> tuple[int, asyncio.Future[str]]:
        """Queue a pass; the future gets its text, or ``PassShed``."""
        headroom = getattr(self.asr.config, "encoder_headroom_s", None)
        ticket = next(self._tickets)
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._futures[ticket] = fut
        self._audio[ticket] = audio
        p = Pass(ticket, session, kind, self.clock(), encoder_frames(audio.size, headroom) / FRAMES_PER_S)
        self._resolve_shed(self.queue.submit(p))
        self._kick()
        return ticket, fut

    async def transcribe(self, session: str, kind: PassKind, audio: np.ndarray) -> str:
        _, fut = self.submit(session, kind, audio)
        return await fut

    def withdraw(self, ticket: int) -> bool:
        """Drop pass ``ticket`` if it has not started: its future raises ``PassShed``."""
        if not self.queue.withdraw(ticket):
            return False
        self._fail(ticket, PassShed())
        self._gauge()
        return True

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ internals

    def _kick(self) -> None:
        batch, shed = self.queue.next_batch(self.clock())
        self._resolve_shed(shed)
        self._gauge()
        if batch is None:
            return
        m = self.metrics
        if m is not None:
            for p in batch.passes:
                m.voice_stage.labels(stage="asr_wait").observe(batch.started_at - p.queued_at)
        audios = [self._audio.pop(p.ticket) for p in batch.passes]
        tickets = [p.ticket for p in batch.passes]
        job = asyncio.get_running_loop().run_in_executor(self._thread, self._run, audios)
        job.add_done_callback(lambda f: self._done(tickets, f))

    def _run(self, audios: Sequence[np.ndarray]) -> list[str]:
        """On the worker thread: one call over the batch (or one per pass), holding a core the LLM
        then leaves alone (``models.cores``)."""
        batch = getattr(self.asr, "transcribe_batch", None)
        with CORES.lend():
            return list(batch(audios)) if batch is not None else [self.asr.transcribe(a) for a in audios]

    def _done(self, tickets: list[int], job: asyncio.Future[list[str]]) -> None:
        batch = self.queue.running
        now = self.clock()
        self.queue.finished(now)
        if job.cancelled():
            for t in tickets:
                self._fail(t, PassShed())
            return
        exc = job.exception()
        if exc is not None:
            for t in tickets:
                self._fail(t, exc)
        else:
            for t, text in zip(tickets, job.result(), strict=True):
                fut = self._futures.pop(t, None)
                if fut is not None and not fut.done():
                    fut.set_result(text)
        if self.metrics is not None and batch is not None:
            self.metrics.voice_stage.labels(stage="asr_run").observe(now - batch.started_at)
            self.metrics.voice_batch.observe(len(batch.passes))
        self._kick()

    def _resolve_shed(self, shed: Sequence[Any]) -> None:
        for s in shed:
            self._audio.pop(s.ticket, None)
            self._fail(s.ticket, PassShed())
            if self.metrics is not None:
                self.metrics.voice_shed.inc()

    def _fail(self, ticket: int, exc: BaseException) -> None:
        self._audio.pop(ticket, None)
        fut = self._futures.pop(ticket, None)
        if fut is not None and not fut.done():
            fut.set_exception(exc)

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.voice_queue.set(self.queue.depth)
            self.metrics.voice_seats.set(len(self._seats))


def shared_worker(svc: Services) -> AsrWorker:
    """The Whisper worker every voice session shares (made here for apps built without one: tests)."""
    if svc.asr_worker is None:
        if svc.asr is None:
            raise RuntimeError("no Whisper on this server: audio input is off")
        svc.asr_worker = AsrWorker(svc.asr, svc.config.audio.max_concurrent_turns or 1024, metrics=svc.metrics)
    worker: AsrWorker = svc.asr_worker
    return worker


async def transcribe_clip(svc: Services, audio: np.ndarray) -> str:
    """One whole clip (an HTTP audio part, an uploaded or inline WAV) as a final pass of the shared queue:
    it waits its turn with every session's passes, so a flood of HTTP audio cannot crowd out the voices."""
    return await shared_worker(svc).transcribe(f"clip_{secrets.token_hex(6)}", "final", audio)


def blocking_transcriber(svc: Services, loop: asyncio.AbstractEventLoop) -> Callable[[np.ndarray], str]:
    """``transcribe_clip`` for synchronous code on a worker thread (a file processor's ``to_text``): it
    waits there for the loop's answer. Called on the loop's own thread it would wait forever: refused."""

    def transcribe(audio: np.ndarray) -> str:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("blocking_transcriber called on the event loop: run it in a thread")
        return asyncio.run_coroutine_threadsafe(transcribe_clip(svc, audio), loop).result()

    return transcribe
