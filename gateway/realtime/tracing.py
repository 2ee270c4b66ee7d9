"""OpenTelemetry traces of Realtime sessions, exported over OTLP/HTTP; off by default.

One owner for tracing: the session shell hands it what ``gateway.realtime.turnlatency`` already
timed (a response's stage boundaries, Whisper passes, TTS chunks, tool calls, image work) and it
draws the spans afterwards with those times, so nothing on the token path is traced and a
session with tracing off pays one ``is None`` test. The SDK is imported only when tracing is on.

Spans follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``): a ``session`` span per
Realtime session (``gen_ai.conversation.id``), a ``turn`` span per spoken user turn (VAD turn,
Whisper passes, transcription), a ``chat {model}`` span per response (token usage, finish
reason) with its ``queue``, ``prefill``, ``decode`` and ``tts chunk`` stages and an
``execute_tool {name}`` span per MCP call. ``session.tracing`` (``workflow_name``, ``group_id``,
``metadata``) lands on the session and response spans. Prompts, transcripts and replies are
recorded only with ``tracing.capture_content``.

Export runs on the SDK's ``BatchSpanProcessor`` thread: ending a span appends to its queue and
never waits on the network; an unreachable collector costs spans (the queue drops past
``max_queue_size``), never a turn. The provider is the app's own, not the process-global one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.config import TracingConfig
    from .response_ending import ResponseEnding
    from .turnlatency import ResponseMarks, TurnLatency, VoiceMarks

log = logging.getLogger("stream_omni.tracing")

PROVIDER = "stream_omni"  # gen_ai.provider.name: the gateway serves its own models
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


class Tracing:
    """The app's tracer provider and its batch export thread."""

    def __init__(self, cfg: TracingConfig, model: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": cfg.service_name}
        self.provider = TracerProvider(resource=Resource.create(attrs))
        # endpoint None: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces
        exporter = OTLPSpanExporter(endpoint=cfg.endpoint, timeout=cfg.export_timeout_s)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))  # its queue and delays: OTEL_BSP_*
        self.tracer = self.provider.get_tracer("stream_omni.gateway")
        self.model = model
        self.capture_content = cfg.capture_content
        self.closing: threading.Thread | None = None  # the exporter's last flush, once closed
        # perf_counter readings (what the stages are timed with) → epoch ns (what spans carry)
        self._offset_ns = time.time_ns() - time.perf_counter_ns()

    def ns(self, t: float) -> int:
        return int(t * 1e9) + self._offset_ns

    def session(self, session_id: str, tracing: Callable[[], Any], now: float) -> SessionTrace:
        return SessionTrace(self, session_id, tracing, now)

    def close(self) -> threading.Thread:
        """Flush and stop the exporter on a thread of its own (returned): a collector that does not
        answer holds that thread for the export timeout, not the server's shutdown."""
        closing = threading.Thread(target=self.provider.shutdown, name="otel-shutdown", daemon=True)
        closing.start()
        self.closing = closing
        return closing


def start_tracing(cfg: TracingConfig, model: str) -> Tracing | None:
    """The app's tracing, or None when it is off (the config, or the standard ``OTEL_SDK_DISABLED``)."""
    if not cfg.enabled or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    return Tracing(cfg, model)


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

    def __init__(self, tracing: Tracing, session_id: str, options: Callable[[], Any], now: float) -> None:
        from opentelemetry import trace

        self.t = tracing
        self._trace = trace
        self.options = options  # the session's current session.tracing value
        self.conversation_id = session_id.replace("sess_", "conv_", 1)
        self.span = tracing.tracer.start_span(
            "session",
            start_time=tracing.ns(now),
            attributes={
                "gen_ai.provider.name": PROVIDER,
                "gen_ai.request.model": tracing.model,
                "gen_ai.conversation.id": self.conversation_id,
                "stream_omni.session.id": session_id,
            },
        )
        self._ctx = trace.set_span_in_context(self.span)
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
        self._span("image processing", self._ctx, start, end, {"stream_omni.images": images})

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
        metrics = ending.metrics
        m = metrics or {}
        latency = {} if lat is None else {f"stream_omni.latency.{k}": v for k, v in lat.wire().items() if v is not None}
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": self.t.model,
            "gen_ai.conversation.id": self.conversation_id,
            "gen_ai.response.id": rid,
            "gen_ai.response.finish_reasons": (finish_reason(ending),),
            "stream_omni.response.status": ending.status,
            **latency,
            **tracing_attributes(self.options()),
        }
        if "tokens" in m:
            attrs["gen_ai.usage.input_tokens"] = int(m.get("prompt_tokens", 0)) + int(m.get("cached_tokens", 0))
            attrs["gen_ai.usage.output_tokens"] = int(m["tokens"])
            attrs["gen_ai.usage.cache_read.input_tokens"] = int(m.get("cached_tokens", 0))
        resp = self._start(f"chat {self.t.model}", parent, marks.created_at, attrs)
        if ending.status == "failed":
            self._failed(resp, ending.error_code or "failed")
        rctx = self._trace.set_span_in_context(resp)
        if lat is not None or "e2e_s" in m:  # its job ran (not refused, nor cancelled before reaching the engine)
            self._model_stages(rctx, marks, m, now)
        for index, start, end, chars in tts:
            self._span("tts chunk", rctx, start, end, {"stream_omni.tts.index": index, "stream_omni.tts.chars": chars})
        for name, call_id, start, end, failed in tools:
            call = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
            span = self._start(f"execute_tool {name}", rctx, start, call)
            if failed:
                self._failed(span, "mcp_call_failed")
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
        turn = self._start("turn", self._ctx, spoken.started_at, {"gen_ai.conversation.id": self.conversation_id})
        if spoken.failed:
            self._failed(turn, "transcription_failed")
        ctx = self._trace.set_span_in_context(turn)
        item = {"stream_omni.item.id": spoken.item_id}
        if spoken.stopped_at is not None:
            self._span("vad turn", ctx, spoken.started_at, spoken.stopped_at, item)
            if spoken.settle_ms is not None:
                turn.set_attribute("stream_omni.vad.settle_ms", spoken.settle_ms)
            if spoken.transcribed_at is not None:
                said = self._transcripts.pop(spoken.item_id, None)
                attrs = item if said is None else {**item, "stream_omni.transcript": said}
                asr = self._start("transcription", ctx, spoken.stopped_at, attrs)
                if spoken.failed:
                    self._failed(asr, "transcription_failed")
                asr.end(end_time=self.t.ns(max(spoken.transcribed_at, spoken.stopped_at)))
        for kind, start, end in spoken.passes:
            self._span("whisper pass", ctx, start, end, {"stream_omni.asr.pass": kind})
        return turn

    def _model_stages(self, ctx: Any, marks: ResponseMarks, m: dict[str, Any], now: float) -> None:
        """``queue``, ``prefill`` and ``decode``, laid end to end from the job reaching the engine."""
        submitted = marks.submitted_at if marks.submitted_at is not None else marks.created_at
        engine_at = submitted + float(m.get("queue_ms") or 0.0) / 1000
        self._span("queue", ctx, min(marks.created_at, submitted), engine_at, {})
        prefilled = engine_at + float(m.get("prefill_ms") or 0.0) / 1000
        if m.get("prefill_ms") is not None:
            prompt = {"gen_ai.usage.input_tokens": int(m.get("prompt_tokens", 0))}  # prefilled now (not cached)
            self._span("prefill", ctx, engine_at, prefilled, prompt)
        # the job's own end (its e2e_s from submission): a spoken reply's response outlasts it by the speech
        ended = submitted + float(m["e2e_s"]) if m.get("e2e_s") is not None else now
        out = {"gen_ai.usage.output_tokens": int(m.get("tokens", 0))}
        self._span("decode", ctx, prefilled, max(min(ended, now), prefilled), out)

    def close(self, now: float) -> None:
        for key, value in tracing_attributes(self.options()).items():
            self.span.set_attribute(key, value)
        self.span.end(end_time=self.t.ns(now))

    # ------------------------------------------------------------------ spans

    def _start(self, name: str, ctx: Any, start: float, attrs: dict[str, Any]) -> Any:
        return self.t.tracer.start_span(name, context=ctx, start_time=self.t.ns(start), attributes=attrs)

    def _failed(self, span: Any, error: str) -> None:
        """A failed stage, as the conventions mark one: ``error.type`` and an error status."""
        span.set_attribute("error.type", error)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))

    def _span(self, name: str, ctx: Any, start: float, end: float, attrs: dict[str, Any]) -> None:
        self._start(name, ctx, start, attrs).end(end_time=self.t.ns(max(end, start)))
