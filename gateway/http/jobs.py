"""A completion's life on the engine, as Chat Completions, Completions and the in-process API share it:
submitted with its events queued to the event loop, cancelled once, watched for the client leaving,
and counted when it ends. What a failed one tells the client is here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from starlette.requests import Request

from models.decode import DecodeJob, Done, JobEvents
from models.engine_client import EngineBusy, Handle
from models.remote import RemoteJob

from ..core.engine_events import AsyncSink
from ..core.services import Services
from . import bodies
from .error_bodies import busy

HTTP_GRACE_S = 30.0  # resume window for SSE when server.grace_period_s is 0

Job = DecodeJob | RemoteJob  # decoded here, or streamed from a remote engine (backend: openai)

# a failed response's error code → HTTP status (anything else: 500)
FAILED_STATUS = {
    "server_busy": 503,
    "engine_unavailable": 502,
    "engine_error": 502,
    "engine_timeout": 504,
    "context_length_exceeded": 400,
}
FAILED = {  # what a client is told; never the engine's address or its own words
    "generation_failed": "generation failed",
    "server_busy": "the model engine is at capacity; retry shortly",
    "engine_unavailable": "the model engine is unavailable",
    "engine_timeout": "the model engine did not answer in time",
    "engine_error": "the model engine failed this request",
    "context_length_exceeded": "the conversation does not fit the model's context",
}


def submit(svc: Services, job: Job, tag: str) -> tuple[Handle, asyncio.Queue[tuple[str, JobEvents]]]:
    """``job`` on the engine, its events (tagged ``tag``) on a queue of this loop; a full engine is a 503."""
    queue: asyncio.Queue[tuple[str, JobEvents]] = asyncio.Queue()
    try:
        handle = svc.engine.submit(job, AsyncSink(asyncio.get_running_loop(), queue, tag))
    except EngineBusy:
        raise busy() from None
    return handle, queue


# the caller's trace context for the request being served (``traced``): the streaming task a request
# starts copies it, so its completion's span finds the same parent
_TRACE_PARENT: ContextVar[Any] = ContextVar("trace_parent", default=None)


def traced(svc: Services, request: Request) -> None:
    """With tracing on: this request's completion spans go under the caller's ``traceparent``, if any."""
    if svc.tracing is not None:
        _TRACE_PARENT.set(svc.tracing.parent(request.headers))


def finished(svc: Services, done: Done, response_id: str, operation: str) -> None:
    """Metrics (and, with tracing on, a span) for one finished completion; ``operation``: ``chat`` or
    ``text_completion`` (the GenAI conventions' names)."""
    if "tokens" in done.metrics:
        svc.metrics.observe_response(done.metrics)
    svc.metrics.responses.labels(status=bodies.STATUS.get(done.reason, done.reason)).inc()
    error = error_code(done) if done.reason == "error" else None
    if error is not None:
        svc.metrics.errors.labels(code=error).inc()
    if svc.tracing is not None:
        svc.tracing.completion(operation, response_id, done.metrics, done.reason, error, _TRACE_PARENT.get())


def error_code(done: Done) -> str:
    code = str(done.metrics.get("error_code") or "generation_failed")
    return code if code in FAILED else "generation_failed"


def canceller(svc: Services, handle: Handle) -> Callable[[], None]:
    """A cancel of ``handle`` that counts once however often it is called."""

    def cancel() -> None:
        if not handle.cancelled.is_set():
            handle.cancel()
            svc.metrics.cancels.inc()

    return cancel


async def disconnected(request: Request) -> None:
    """Returns when the client has gone (an HTTP request's receive channel says so)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
