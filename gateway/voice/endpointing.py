"""The end-of-turn model off the event loop: one thread every session's probes share, and its cost.

Thin I/O around ``processors.smart_turn``: ``score`` runs the model on a turn's audio on the
``so-turn`` thread while holding a core the LLM leaves alone (``models.cores``, as Whisper passes
do), and records what it cost. The policy that turns the answer into a silence window is pure
(``processors.turn_end.EndOfTurn``); ``MediaInput`` wires the two to the VAD.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from models.cores import CORES
from processors.smart_turn import SmartTurnUnavailable, TurnModel, load

log = logging.getLogger("stream_omni.turns")


class TurnModelRunner:
    """The process's end-of-turn model on its own thread. ``score`` never blocks the event loop."""

    def __init__(self, model: TurnModel, metrics: Any = None):
        self.model = model
        self.metrics = metrics  # gateway.core.metrics.Metrics, or None (benches, unit tests)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="so-turn")
        self._lock = threading.Lock()
        self.calls = 0
        self.seconds = 0.0  # compute time of every call so far
        self.heard_s = 0.0  # voice input heard by every session so far (the cost's denominator)

    async def score(self, audio: np.ndarray) -> float:
        """P(the turn is complete) for float32 ``[n]`` at 16 kHz (the last 8 s count)."""
        return (await self.timed(audio))[0]

    async def timed(self, audio: np.ndarray) -> tuple[float, float]:
        """``score`` and the model's compute time for it in s (the rest of the wait is the thread's queue)."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._run, audio)

    def _run(self, audio: np.ndarray) -> tuple[float, float]:
        t0 = time.perf_counter()
        with CORES.lend():
            p = self.model(audio)
        spent = time.perf_counter() - t0
        with self._lock:
            self.calls += 1
            self.seconds += spent
        if self.metrics is not None:
            self.metrics.voice_stage.labels(stage="end_of_turn").observe(spent)
            self.metrics.turn_model_seconds.inc(spent)
        return p, spent

    def heard(self, seconds: float) -> None:
        """``seconds`` more voice input went through a VAD that may ask the model (on the event loop)."""
        self.heard_s += seconds
        if self.metrics is not None and self.heard_s > 0:
            self.metrics.turn_model_cost.set(self.seconds / self.heard_s)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)


def load_runner(metrics: Any = None) -> TurnModelRunner | None:
    """The Smart Turn runner, warmed; None (logged once) where the model file is not installed."""
    try:
        model = load()
    except SmartTurnUnavailable as exc:
        log.warning("end-of-turn model off (turn_detection.model falls back to the transcript): %s", exc)
        return None
    return TurnModelRunner(model, metrics)
