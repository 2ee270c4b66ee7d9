"""A Realtime session's OpenTelemetry spans, drawn from what ``gateway.realtime.turnlatency`` timed.

The session shell hands ``SessionTrace`` a response's stage boundaries, Whisper passes, TTS chunks,
tool calls and image work, and it draws the spans afterwards with those times, so nothing on the
token path is traced and a session with tracing off pays one ``is None`` test. The provider, its
export and the spans every room draws alike are ``gateway.core.telemetry``'s.

Spans follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``): a ``session`` span per
Realtime session (``gen_ai.conversation.id``; under the caller's ``traceparent`` when the handshake
carried one), a ``turn`` span per spoken user turn (VAD turn, Whisper passes, transcription), a
``chat {model}`` span per response (token usage, finish reason) with its ``queue``, ``prefill``,
``decode`` and ``tts chunk`` stages and an ``execute_tool {name}`` span per MCP call.
``session.tracing`` (``workflow_name``, ``group_id``, ``metadata``) lands on the session and
response spans. Prompts, transcripts and replies are recorded only with ``tracing.capture_content``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.telemetry import PROVIDER, Tracing

if TYPE_CHECKING:
    from .response_ending import ResponseEnding
    from .turnlatency import ResponseMarks, TurnLatency, VoiceMarks

_MAX_META = 16  # session.tracing.metadata keys recorded (the rest are dropped)
_MAX_VALUE = 512  # characters of one recorded metadata value
_OBSERVED = frozenset(
    {
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "conversation.item.input_audio_transcription.completed",
    }
)


def finish_reason(ending: ResponseEnding) -> str:
    """``gen_ai.response.finish_reasons``' words for a Realtime ending (``stop``, ``length`` as the
    chat APIs say them; otherwise the Realtime reason: ``turn_detected``, ``client_cancelled`` ...)."""
    if ending.status == "completed":
        return "stop"
    if ending.status == "failed":
        return "error"
    return {"max_output_tokens": "length"}.get(ending.reason or "", ending.reason or ending.status)


def tracing_attributes(value: Any) -> dict[str, str]:
    """``session.tracing`` as span attributes (``"auto"`` and null add none)."""
    if not isinstance(value, dict):
        return {}
    out: dict[str, str] = {}
    for key in ("workflow_name", "group_id"):
        if isinstance(value.get(key), str):
            out[f"stream_omni.tracing.{key}"] = value[key][:_MAX_VALUE]
    meta = value.get("metadata")
    if isinstance(meta, dict):
        for k, v in list(meta.items())[:_MAX_META]:
            out[f"stream_omni.tracing.metadata.{str(k)[:64]}"] = (v if isinstance(v, str) else json.dumps(v))[
                :_MAX_VALUE
            ]
    return out


class SessionTrace:
    """One Realtime session's spans: the session span stays open until ``close``; every other span
    is drawn when its work is over, from the times measured for it."""

    def __init__(
        self, tracing: Tracing, session_id: str, options: Callable[[], Any], now: float, parent: Any = None
    ) -> None:
        """``parent``: the caller's trace context (``Tracing.parent``), or None: a trace of its own."""
        self.t = tracing
        self._trace = tracing.api
        self.options = options  # the session's current session.tracing value
        self.conversation_id = session_id.replace("sess_", "conv_", 1)
        self.span = tracing.tracer.start_span(
            "session",
            context=parent,
            start_time=tracing.ns(now),
            attributes={
                "gen_ai.provider.name": PROVIDER,
                "gen_ai.request.model": tracing.model,
                "gen_ai.conversation.id": self.conversation_id,
                "stream_omni.session.id": session_id,
            },
        )
        self._ctx = self._trace.set_span_in_context(self.span)
        self._tts: dict[str, list[tuple[int, float, float, int]]] = {}  # response → (index, start, end, chars)
        self._tools: dict[str, list[tuple[str, str, float, float, bool]]] = {}  # response → tool calls
        self._open_tools: dict[str, tuple[str, str, str, float]] = {}  # item id → (response, name, id, start)
        self._transcripts: dict[str, str] = {}  # item id → transcript (capture_content only)

    # ------------------------------------------------------------------ what the shell reports

    def observe(self, events: list[dict[str, Any]], now: float) -> None:
        """Events just sent: tool calls starting and ending (and transcripts, when content is kept)."""
        for ev in events:
            kind = ev.get("type", "")
            if kind not in _OBSERVED:  # (text and audio deltas: one set lookup each)
                continue
            if kind == "response.output_item.added" and ev.get("item", {}).get("type") == "mcp_call":
                item = ev["item"]  # announced; it runs from in_progress (after any approval)
                self._open_tools[item["id"]] = (ev.get("response_id", ""), item.get("name", ""), item["id"], now)
            elif kind == "response.mcp_call.in_progress" and ev.get("item_id") in self._open_tools:
                rid, name, call_id, _ = self._open_tools[ev["item_id"]]
                self._open_tools[call_id] = (rid, name, call_id, now)
            elif kind in ("response.mcp_call.completed", "response.mcp_call.failed"):
                open_ = self._open_tools.pop(ev.get("item_id", ""), None)
                if open_ is not None:
                    rid, name, call_id, start = open_
                    failed = kind.endswith("failed")
                    self._tools.setdefault(rid, []).append((name, call_id, start, now, failed))
            elif kind == "conversation.item.input_audio_transcription.completed" and self.t.capture_content:
                self._transcripts[ev["item_id"]] = ev.get("transcript", "")

    def tts_chunk(self, response_id: str, index: int, start: float, end: float, chars: int) -> None:
        self._tts.setdefault(response_id, []).append((index, start, end, chars))

    def image(self, start: float, end: float, images: int) -> None:
        """Images of a user item described (decode, resize, caption) from ``start`` to ``end``."""
        self.t.span("image processing", self._ctx, start, end, {"stream_omni.images": images})

    def response(
        self, rid: str, ending: ResponseEnding, timed: tuple[ResponseMarks, TurnLatency | None] | None, now: float
    ) -> None:
        """``rid`` ended so (``response.done`` goes out now): its spans, from its marks.
        A response that wrote no text (a function call alone, cancelled early) has no latency record
        but is drawn all the same, with the model stages its job reported."""
        tts, tools = self._tts.pop(rid, []), self._tools.pop(rid, [])
        if timed is None:
            return  # never seen created: nothing to hang spans on
        marks, lat = timed
        turn = self._turn(marks.spoken)
        parent = self._ctx if turn is None else self._trace.set_span_in_context(turn)
        m = ending.metrics or {}
        latency = {} if lat is None else {f"stream_omni.latency.{k}": v for k, v in lat.wire().items() if v is not None}
        attrs = {
            **self.t.response_attributes("chat", rid, finish_reason(ending), m),
            "gen_ai.conversation.id": self.conversation_id,
            "stream_omni.response.status": ending.status,
            **latency,
            **tracing_attributes(self.options()),
        }
        resp = self.t.start(f"chat {self.t.model}", parent, marks.created_at, attrs)
        if ending.status == "failed":
            self.t.failed(resp, ending.error_code or "failed")
        rctx = self._trace.set_span_in_context(resp)
        if lat is not None or "e2e_s" in m:  # its job ran (not refused, nor cancelled before reaching the engine)
            submitted = marks.submitted_at if marks.submitted_at is not None else marks.created_at
            self.t.model_stages(rctx, marks.created_at, submitted, m, now)
        for index, start, end, chars in tts:
            self.t.span("tts chunk", rctx, start, end, {"stream_omni.tts.index": index, "stream_omni.tts.chars": chars})
        for name, call_id, start, end, failed in tools:
            call = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
            span = self.t.start(f"execute_tool {name}", rctx, start, call)
            if failed:
                self.t.failed(span, "mcp_call_failed")
            span.end(end_time=self.t.ns(max(end, start)))
        resp.end(end_time=self.t.ns(now))
        if turn is not None:
            turn.end(end_time=self.t.ns(now))

    def unanswered(self, spoken: VoiceMarks, now: float) -> None:
        """A user turn no response answers: its ``turn`` span alone, ended where its last stage did."""
        turn = self._turn(spoken)
        if turn is None:
            return
        marks = (spoken.stopped_at, spoken.transcribed_at, *(end for _, _, end in spoken.passes))
        ends = [t for t in marks if t is not None]
        turn.end(end_time=self.t.ns(max(ends, default=now)))

    def _turn(self, spoken: VoiceMarks | None) -> Any:
        """The open ``turn`` span of a spoken user turn, with its VAD, Whisper and transcription spans."""
        if spoken is None or spoken.started_at is None:
            return None
        turn = self.t.start("turn", self._ctx, spoken.started_at, {"gen_ai.conversation.id": self.conversation_id})
        if spoken.failed:
            self.t.failed(turn, "transcription_failed")
        ctx = self._trace.set_span_in_context(turn)
        item = {"stream_omni.item.id": spoken.item_id}
        if spoken.stopped_at is not None:
            self.t.span("vad turn", ctx, spoken.started_at, spoken.stopped_at, item)
            if spoken.settle_ms is not None:
                turn.set_attribute("stream_omni.vad.settle_ms", spoken.settle_ms)
            if spoken.transcribed_at is not None:
                said = self._transcripts.pop(spoken.item_id, None)
                attrs = item if said is None else {**item, "stream_omni.transcript": said}
                asr = self.t.start("transcription", ctx, spoken.stopped_at, attrs)
                if spoken.failed:
                    self.t.failed(asr, "transcription_failed")
                asr.end(end_time=self.t.ns(max(spoken.transcribed_at, spoken.stopped_at)))
        for kind, start, end in spoken.passes:
            self.t.span("whisper pass", ctx, start, end, {"stream_omni.asr.pass": kind})
        return turn

    def close(self, now: float) -> None:
        for key, value in tracing_attributes(self.options()).items():
            self.span.set_attribute(key, value)
        self.span.end(end_time=self.t.ns(now))
