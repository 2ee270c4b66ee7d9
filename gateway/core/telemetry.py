"""The app's OpenTelemetry tracing: its tracer provider, OTLP/HTTP export, and the spans every room draws alike.

Off by default; the SDK is imported only when it is on. One provider per app (not the process-global
one), exported by the SDK's ``BatchSpanProcessor``: ending a span appends to its queue and never waits
on the network, so an unreachable collector costs spans (the queue drops past ``max_queue_size``),
never a turn. Spans follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``).

What is drawn here: an HTTP completion's span (``chat {model}``, ``text_completion {model}``) and the
model stages every response has (``queue``, ``prefill``, ``decode``), from times already measured, so
nothing on the token path is traced. A Realtime session's spans are
``gateway.realtime.tracing.SessionTrace``'s. A caller's W3C ``traceparent`` (or whatever
``OTEL_PROPAGATORS`` names) makes its trace the parent of ours.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import TracingConfig

PROVIDER = "stream_omni"  # gen_ai.provider.name: the gateway serves its own models


class Tracing:
    """The app's tracer provider and its batch export thread."""

    def __init__(self, cfg: TracingConfig, model: str) -> None:
        from opentelemetry import trace
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
        self.api = trace  # the OpenTelemetry API module (contexts, statuses), imported only when on
        self.model = model
        self.capture_content = cfg.capture_content
        self.closing: threading.Thread | None = None  # the exporter's last flush, once closed
        # perf_counter readings (what the stages are timed with) → epoch ns (what spans carry)
        self._offset_ns = time.time_ns() - time.perf_counter_ns()

    def ns(self, t: float) -> int:
        return int(t * 1e9) + self._offset_ns

    def parent(self, headers: Mapping[str, str]) -> Any:
        """The caller's trace context from a request's headers (``traceparent``; an empty context,
        so a new trace, when there is none or it is malformed)."""
        from opentelemetry import propagate

        return propagate.extract(headers)

    def start(self, name: str, ctx: Any, start: float, attrs: dict[str, Any]) -> Any:
        return self.tracer.start_span(name, context=ctx, start_time=self.ns(start), attributes=attrs)

    def span(self, name: str, ctx: Any, start: float, end: float, attrs: dict[str, Any]) -> None:
        self.start(name, ctx, start, attrs).end(end_time=self.ns(max(end, start)))

    def failed(self, span: Any, error: str) -> None:
        """A failed stage, as the conventions mark one: ``error.type`` and an error status."""
        span.set_attribute("error.type", error)
        span.set_status(self.api.Status(self.api.StatusCode.ERROR, error))

    def model_stages(self, ctx: Any, start: float, submitted: float, m: Mapping[str, Any], now: float) -> None:
        """``queue`` (from ``start``), ``prefill`` and ``decode``, laid end to end from the job's
        submission with the durations its metrics report (``queue_ms``, ``prefill_ms``, ``e2e_s``)."""
        engine_at = submitted + float(m.get("queue_ms") or 0.0) / 1000
        self.span("queue", ctx, min(start, submitted), engine_at, {})
        prefilled = engine_at + float(m.get("prefill_ms") or 0.0) / 1000
        if m.get("prefill_ms") is not None:
            prompt = {"gen_ai.usage.input_tokens": int(m.get("prompt_tokens", 0))}  # prefilled now (not cached)
            self.span("prefill", ctx, engine_at, prefilled, prompt)
        # the job's own end (its e2e_s from submission): a spoken reply's response outlasts it by the speech
        ended = submitted + float(m["e2e_s"]) if m.get("e2e_s") is not None else now
        out = {"gen_ai.usage.output_tokens": int(m.get("tokens", 0))}
        self.span("decode", ctx, prefilled, max(min(ended, now), prefilled), out)

    def completion(
        self, operation: str, response_id: str, m: Mapping[str, Any], finish: str, error: str | None, parent: Any
    ) -> None:
        """An HTTP completion's job ended now: a ``{operation} {model}`` span from its submission
        (``operation``: ``chat`` or ``text_completion``), with its model stages, under ``parent``."""
        now = time.perf_counter()
        submitted = now - float(m.get("e2e_s") or 0.0)
        attrs = self.response_attributes(operation, response_id, finish, m)
        span = self.start(f"{operation} {self.model}", parent, submitted, attrs)
        if error is not None:
            self.failed(span, error)
        if "e2e_s" in m:
            self.model_stages(self.api.set_span_in_context(span, parent), submitted, submitted, m, now)
        span.end(end_time=self.ns(now))

    def response_attributes(
        self, operation: str, response_id: str, finish: str, m: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A response span's GenAI attributes: what was asked of which model, how it ended, its tokens."""
        return {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": self.model,
            "gen_ai.response.id": response_id,
            "gen_ai.response.finish_reasons": (finish,),
            **usage_attributes(m),
        }

    def close(self) -> threading.Thread:
        """Flush and stop the exporter on a thread of its own (returned): a collector that does not
        answer holds that thread for the export timeout, not the server's shutdown."""
        closing = threading.Thread(target=self.provider.shutdown, name="otel-shutdown", daemon=True)
        closing.start()
        self.closing = closing
        return closing


def usage_attributes(m: Mapping[str, Any]) -> dict[str, int]:
    """A job's token counts as ``gen_ai.usage.*`` (input counts the cached prompt too, as the conventions do)."""
    if "tokens" not in m:
        return {}
    cached = int(m.get("cached_tokens", 0))
    return {
        "gen_ai.usage.input_tokens": int(m.get("prompt_tokens", 0)) + cached,
        "gen_ai.usage.output_tokens": int(m["tokens"]),
        "gen_ai.usage.cache_read.input_tokens": cached,
    }


def start_tracing(cfg: TracingConfig, model: str) -> Tracing | None:
    """The app's tracing, or None when it is off (the config, or the standard ``OTEL_SDK_DISABLED``)."""
    if not cfg.enabled or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    return Tracing(cfg, model)
