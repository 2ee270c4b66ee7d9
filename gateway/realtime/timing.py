"""A session's stage timing, wired in: turn latency for ``response.done`` and spans when traced (thin I/O).

``LiveSession`` makes one and tells it when a job reached the engine or a prepared one was
adopted; the rest it takes from where the session already passes: the events it sends (a tap),
the session's ``finish_hook``, the Whisper passes (``MediaInput.on_pass``) and synthesized chunks
(``Speaker.on_chunk``). The clock is read here and nowhere in ``turnlatency``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..core.telemetry import Tracing
from .tracing import SessionTrace
from .turnlatency import TurnTimer

if TYPE_CHECKING:
    from ..voice.speaker import Speaker
    from . import protocol as p
    from .media import MediaInput
    from .response_ending import ResponseEnding
    from .session import Session
    from .speculation import PreparedReply

clock = time.perf_counter


class SessionTiming:
    def __init__(
        self,
        tracing: Tracing | None,
        session: Session,
        media: MediaInput,
        speaker: Speaker,
        taps: list[Callable[[list[dict[str, Any]]], None]],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``taps``: the session's listeners to the events it sends (this joins them); ``headers``: the
        request that opened the session (its ``traceparent`` parents the session's trace)."""
        self.media = media
        self.timer = TurnTimer()
        self.trace: SessionTrace | None = None
        if tracing is not None:  # traces off: no span work, no hooks beyond the latency record's
            parent = tracing.parent(headers) if headers is not None else None
            self.trace = SessionTrace(tracing, session.id, lambda: session.options.tracing, clock(), parent)
            speaker.on_chunk = self.trace.tts_chunk
        taps.append(self._sent)
        session.finish_hook = self._finish
        media.on_pass = self.timer.whisper_pass

    def _sent(self, events: list[dict[str, Any]]) -> None:
        now = clock()
        vad = self.media.voice.vad if self.media.voice is not None else None
        if vad is None:
            self.timer.observe(events, now)
        else:  # the silence the turn ended after: its own window (semantic_vad, the model), not the configured one
            self.timer.observe(events, now, vad.now_ms, vad.machine.ended_silence_ms)
        unanswered = self.timer.take_unanswered()
        if self.trace is not None:
            self.trace.observe(events, now)
            for spoken in unanswered:
                self.trace.unanswered(spoken, now)

    def _finish(self, rid: str, ending: ResponseEnding) -> dict[str, Any] | None:
        """``rid`` ends: its turn latency joins the metrics ``response.done`` carries; its spans are drawn."""
        metrics = ending.metrics
        timed = self.timer.finish(rid, metrics)
        if self.trace is not None:
            self.trace.response(rid, ending, timed, clock())
        if timed is None or timed[1] is None or metrics is None:
            return metrics
        return {**metrics, "turn_latency": timed[1].wire()}

    def submitted(self, response_id: str) -> None:
        self.timer.submitted(response_id, clock())

    def adopted(self, spec: PreparedReply, response_id: str) -> None:
        self.timer.adopted(response_id, spec.submitted_at)

    async def resolving(self, work: Awaitable[None], ev: p.ItemCreate) -> None:
        """An item's media resolved (images described): an ``image processing`` span when it had images."""
        start = clock()
        await work
        parts = getattr(ev.item, "content", None) or []
        images = sum(1 for part in parts if getattr(part, "type", "") == "input_image")
        if self.trace is not None and images:
            self.trace.image(start, clock(), images)

    def close(self) -> None:
        if self.trace is not None:
            now = clock()
            for spoken in self.timer.pending():  # turns the session ended before answering
                self.trace.unanswered(spoken, now)
            self.trace.close(now)
