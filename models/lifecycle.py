"""A response's events, its end, and the life both kinds of job share.

``DecodeJob`` (models/decode.py) decodes on a local model; ``RemoteJob`` (models/remote.py) feeds
a remote engine's text deltas through the same chunk scheduler. Alike in both: a clock started
with the job, its ``JobPhase``, the first chunk's time and the chunk count, and the end — once only; ``done``
carries the job's metrics, and the scheduler's held-back text is flushed unless the response was
cancelled or failed. ``JobLifecycle`` holds that. How each job gets its text (logits chosen here,
or deltas read from a socket) and what its metrics say are its own, and so are cancel's extras
(a DecodeJob hands on the ids it held back; a RemoteJob's cancel races its worker under a lock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .scheduler import Chunk, ChunkScheduler


class JobPhase(Enum):
    """Where a response stands, named as llama.cpp's ``slot_state`` names a slot's: set at each transition."""

    QUEUED = "queued"  # submitted: its prompt is not started (a remote job: no delta yet)
    PREFILL = "prefill"  # its prompt goes in, piece by piece: no token chosen yet
    DECODE = "decode"  # tokens are chosen (or deltas stream) one step at a time
    DONE = "done"  # ended (stop, length, cancelled, error): nothing more comes


@dataclass
class Done:
    reason: str  # "stop" (eos / stop sequence) | "length" | "cancelled" | "error"
    metrics: dict[str, Any]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token as a ``logprobs`` answer shows it (OpenAI's legacy completions shape)."""

    text: str  # the token alone, decoded
    logprob: float  # log p of the token under the model (before temperature and top-p)
    top: tuple[tuple[str, float], ...]  # the ``top_logprobs`` most likely tokens at its position, best first


@dataclass
class JobEvents:
    chunks: list[Chunk] = field(default_factory=list)
    done: Done | None = None
    requests: list[str] = field(default_factory=list)  # intercepted model requests (e.g. image prompts)
    tool_calls: list[str] = field(default_factory=list)  # intercepted tool-call bodies (JSON text), in order
    tokens: list[int] = field(default_factory=list)  # ids accepted this step (the chunks' ``tokens`` count them)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per accepted id, when the job tracks them


def merge(a: JobEvents, b: JobEvents) -> JobEvents:
    """``b`` appended to ``a`` (its ``done`` wins)."""
    a.chunks.extend(b.chunks)
    a.requests.extend(b.requests)
    a.tool_calls.extend(b.tool_calls)
    a.tokens.extend(b.tokens)
    a.logprobs.extend(b.logprobs)
    a.done = b.done or a.done
    return a


class JobLifecycle:
    """The start, first chunk and end of one response (see the module docstring)."""

    hands_tool_calls = True  # the end hands on tool calls the scheduler cut out (False: they are dropped)

    def _start(self, scheduler: ChunkScheduler, clock: Callable[[], float]) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.phase = JobPhase.QUEUED
        self.t_start = clock()
        self.t_first: float | None = None
        self.n_chunks = 0

    @property
    def finished(self) -> bool:
        return self.phase is JobPhase.DONE

    def _note_chunks(self, chunks: list[Chunk]) -> None:
        if chunks and self.t_first is None:
            self.t_first = self.clock()
        self.n_chunks += len(chunks)

    def _end(self, done: Done) -> JobEvents:
        """The response's last events (none when it has already ended); ``done`` gets the metrics."""
        if self.phase is JobPhase.DONE:
            return JobEvents()
        self.phase = JobPhase.DONE
        flush = done.reason not in ("cancelled", "error")  # text held back stays unshown then
        chunks = self.scheduler.finish() if flush else []
        self._note_chunks(chunks)
        calls, self.scheduler.tool_calls = (self.scheduler.tool_calls if flush else []), []
        done.metrics = {**self.metrics(), **done.metrics}
        return JobEvents(chunks=chunks, done=done, tool_calls=calls if self.hands_tool_calls else [])

    def metrics(self) -> dict[str, Any]:
        raise NotImplementedError
