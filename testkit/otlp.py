"""A real OTLP/HTTP trace receiver for tests and benches: POST /v1/traces, protobuf decoded with opentelemetry-proto.

It runs a ``ThreadingHTTPServer`` on a free loopback port and keeps every span it was sent, flattened
to plain values (ids as hex, times in ns, attributes as Python values), so a test can check the tree.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def decode(body: bytes) -> list[Span]:
    """An ``ExportTraceServiceRequest`` → its spans."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        s.name,
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        s.start_time_unix_nano,
                        s.end_time_unix_nano,
                        _attrs(s.attributes),
                        resource,
                    )
                )
    return out


class OtlpReceiver:
    """``with OtlpReceiver() as rx:`` — ``rx.endpoint`` is the traces URL, ``rx.spans`` what came in."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                spans = decode(body)
                with receiver._lock:
                    receiver.spans.extend(spans)
                    receiver.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, name: str, timeout: float = 30.0, count: int = 1) -> list[Span]:
        """The spans named ``name`` once ``count`` of them arrived (polls; raises TimeoutError)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = [s for s in self.spans if s.name == name]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} span(s) named {name!r} did not arrive; got {self.names()}")
            time.sleep(0.02)

    def names(self) -> list[str]:
        with self._lock:
            return [s.name for s in self.spans]


def tree(spans: list[Span], attributes: tuple[str, ...] = ()) -> str:
    """The spans as an indented text tree: start (ms after the root's), duration, and chosen attributes."""
    by_parent: dict[str, list[Span]] = {}
    for s in spans:
        by_parent.setdefault(s.parent_id, []).append(s)
    lines: list[str] = []

    def walk(s: Span, depth: int, t0: int) -> None:
        shown = " ".join(f"{k}={s.attributes[k]!r}" for k in attributes if k in s.attributes)
        lines.append(f"{(s.start_ns - t0) / 1e6:8.1f} ms {s.ms:8.1f} ms  {'  ' * depth}{s.name}  {shown}".rstrip())
        for child in sorted(by_parent.get(s.span_id, []), key=lambda c: (c.start_ns, c.name)):
            walk(child, depth + 1, t0)

    for root in sorted(by_parent.get("", []), key=lambda r: r.start_ns):
        walk(root, 0, root.start_ns)
    return "\n".join(lines)
