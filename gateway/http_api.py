"""OpenAI-compatible HTTP API: ``POST /v1/chat/completions`` and its SSE resume.

``POST /v1/chat/completions`` takes OpenAI's request body (see ``gateway.http_request``) and
answers a ``chat.completion``, or with ``"stream": true`` an SSE stream of
``chat.completion.chunk`` objects ending in ``data: [DONE]``. Each delta is one chunk of the
chunk scheduler. Errors are OpenAI's ``{"error": {...}}`` with a matching status code.

**Resume.** Every SSE event carries ``id: <completion_id>:<n>`` (n = 0, 1, …; ``[DONE]`` too). A
streamed completion keeps decoding when its client drops, for ``server.grace_period_s`` (30 s when
that is 0). To pick it up again::

    GET /v1/chat/completions/<completion_id>/stream
    Last-Event-ID: <completion_id>:<n>

returns every event after ``n``, then the live ones, then ``[DONE]`` — what a browser
``EventSource`` sends by itself when pointed at that URL (without the header: from the start).
An unknown or expired id is 404 ``completion_not_found``; events no longer buffered are 410
``resume_failed``. When the server has API keys, a resume needs the key that started the
completion (``Authorization: Bearer``; a browser ``EventSource`` cannot send it — use fetch). A
non-streamed request is cancelled as soon as its client disconnects.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from models.decode import ContextOverflow, DecodeJob, Done, JobEvents
from models.engine import AsyncSink, EngineBusy, Handle

from . import http_shapes as shapes
from .http_content import chat_messages
from .http_errors import ApiError, busy, error_body, error_response
from .http_request import ChatRequest, parse, read_body
from .http_stream import CompletionStore, CompletionStream, SseResponse, dumps
from .security import bearer, http_api_key_ok

if TYPE_CHECKING:
    from .app import Services

log = logging.getLogger("stream_omni.http")

HTTP_GRACE_S = 30.0  # resume window for SSE when server.grace_period_s is 0


def routes(services: Callable[[], Any]) -> list[BaseRoute]:
    """Routes of the HTTP API; ``services()`` returns the app's ``Services`` once started."""
    store = CompletionStore()

    def guarded(handler: Callable[[Services, Request], Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            svc = services()
            try:
                if not http_api_key_ok(request, svc.config.server.api_keys):
                    raise ApiError(
                        401,
                        "invalid_api_key",
                        "invalid or missing API key (Authorization: Bearer …)",
                        headers={"WWW-Authenticate": "Bearer"},
                    )
                return await handler(svc, request)
            except ApiError as exc:
                svc.metrics.errors.labels(code=exc.code).inc()
                return error_response(exc)
            except Exception as exc:  # a bug costs this request, not the server, and says nothing inside
                log.error("chat completion failed: %s", type(exc).__name__, exc_info=True)
                svc.metrics.errors.labels(code="server_error").inc()
                return error_response(ApiError(500, "server_error", "the server failed to handle this request"))

        return endpoint

    async def create(svc: Services, request: Request) -> Response:
        return await _create(svc, store, request)

    async def resume(svc: Services, request: Request) -> Response:
        return _resume(svc, store, request)

    return [
        Route("/v1/chat/completions", guarded(create), methods=["POST"]),
        Route("/v1/chat/completions/{cid}/stream", guarded(resume), methods=["GET"]),
    ]


def _owner(svc: Services, request: Request) -> str:
    """Who may resume a stream: the API key that started it (anyone, when the server has no keys)."""
    if not svc.config.server.api_keys:
        return ""
    return hashlib.sha256((bearer(request) or "").encode()).hexdigest()


# ---------------------------------------------------------------------- POST /v1/chat/completions


async def _create(svc: Services, store: CompletionStore, request: Request) -> Response:
    req = parse(await read_body(request, svc.config.limits.max_http_body_bytes))
    if req.model != svc.backend.name:
        raise ApiError(
            404,
            "model_not_found",
            f"the model {req.model!r} does not exist; this server serves {svc.backend.name!r}",
            "model",
        )
    if not svc.engine_has_room():
        raise busy()
    messages = await chat_messages(svc, req.messages)
    job = _job(svc, req, messages)
    header = shapes.Header(f"chatcmpl-{secrets.token_hex(16)}", int(time.time()), svc.backend.name)
    if req.stream:
        return _start_stream(svc, store, request, req, job, header)
    return await _complete(svc, request, job, header)


def _job(svc: Services, req: ChatRequest, messages: list[dict[str, str]]) -> DecodeJob:
    cap = svc.config.session.max_output_tokens
    asked = req.token_cap()
    sched: dict[str, Any] = req.scheduler.model_dump(exclude_none=True) if req.scheduler else {}
    sched["stop"] = req.stop_sequences()
    try:
        return DecodeJob(
            svc.backend,
            svc.backend.new_state(),
            svc.backend.chat_tokens(messages),
            svc.sampling(
                {
                    "temperature": req.temperature if req.temperature is not None else svc.config.session.temperature,
                    "top_p": req.top_p if req.top_p is not None else svc.config.session.top_p,
                    "seed": req.seed,
                    "max_tokens": cap if asked is None else min(asked, cap),
                }
            ),
            svc.scheduler_config(sched),
            *svc.drafting(),
        )
    except ContextOverflow as exc:
        raise ApiError(400, "context_length_exceeded", str(exc), "messages") from None
    except ValueError as exc:  # scheduler/sampling values the pydantic model could not rule out
        raise ApiError(400, "invalid_value", str(exc)) from None


def _submit(svc: Services, job: DecodeJob, tag: str) -> tuple[Handle, asyncio.Queue[tuple[str, JobEvents]]]:
    queue: asyncio.Queue[tuple[str, JobEvents]] = asyncio.Queue()
    try:
        handle = svc.engine.submit(job, AsyncSink(asyncio.get_running_loop(), queue, tag))
    except EngineBusy:
        raise busy() from None
    return handle, queue


def _finished(svc: Services, done: Done) -> None:
    """Metrics for one finished completion."""
    if "tokens" in done.metrics:
        svc.metrics.observe_response(done.metrics)
    svc.metrics.responses.labels(status=shapes.STATUS.get(done.reason, done.reason)).inc()
    if done.reason == "error":
        svc.metrics.errors.labels(code="generation_failed").inc()


def _cancel(svc: Services, handle: Handle) -> Callable[[], None]:
    def cancel() -> None:
        if not handle.cancelled.is_set():
            handle.cancel()
            svc.metrics.cancels.inc()

    return cancel


# ---------------------------------------------------------------------- non-streamed


async def _complete(svc: Services, request: Request, job: DecodeJob, h: shapes.Header) -> Response:
    handle, queue = _submit(svc, job, h.id)
    collect = asyncio.create_task(_collect(queue))
    gone = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not collect.done():  # the client left: stop decoding for nobody
            _cancel(svc, handle)()
        text, done = await collect
    finally:
        gone.cancel()
        handle.cancel()  # no-op when finished; never leaves a job running if this task is cancelled
    _finished(svc, done)
    if done.reason == "cancelled":
        return Response(status_code=499)  # nobody is listening
    if done.reason not in shapes.FINISH:
        return JSONResponse(error_body(500, "generation_failed", "generation failed"), status_code=500)
    return JSONResponse(shapes.completion(h, text, shapes.FINISH[done.reason], done.metrics))


async def _collect(queue: asyncio.Queue[tuple[str, JobEvents]]) -> tuple[str, Done]:
    parts: list[str] = []
    while True:
        _, events = await queue.get()
        parts.extend(c.text for c in events.chunks)
        if events.done is not None:
            return "".join(parts), events.done


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


# ---------------------------------------------------------------------- streamed (SSE)


def _start_stream(
    svc: Services, store: CompletionStore, request: Request, req: ChatRequest, job: DecodeJob, h: shapes.Header
) -> Response:
    stream = CompletionStream(h.id, _owner(svc, request), svc.config.server.grace_period_s or HTTP_GRACE_S)
    if not store.add(stream):
        raise busy("too many streamed completions in flight; retry shortly")
    try:
        handle, queue = _submit(svc, job, h.id)
    except ApiError:
        store.drop(stream)
        raise
    stream.cancel = _cancel(svc, handle)
    with_usage = bool(req.stream_options and req.stream_options.include_usage)
    stream.push(dumps(shapes.chunk(h, {"role": "assistant", "content": ""}, with_usage=with_usage)))
    stream.task = asyncio.create_task(_pump(svc, stream, queue, h, with_usage))
    return SseResponse(store, stream, -1)


async def _pump(
    svc: Services,
    stream: CompletionStream,
    queue: asyncio.Queue[tuple[str, JobEvents]],
    h: shapes.Header,
    with_usage: bool,
) -> None:
    """Engine events → numbered SSE frames, until the job is done."""
    while True:
        _, events = await queue.get()
        for c in events.chunks:
            stream.push(dumps(shapes.chunk(h, {"content": c.text}, with_usage=with_usage)))
        done = events.done
        if done is None:
            continue
        _finished(svc, done)
        if done.reason in shapes.FINISH:
            stream.push(dumps(shapes.chunk(h, {}, shapes.FINISH[done.reason], with_usage=with_usage)))
            if with_usage:
                stream.push(dumps(shapes.usage_chunk(h, done.metrics)))
        elif done.reason == "cancelled":
            stream.push(dumps(error_body(500, "cancelled", "the completion was cancelled")))
        else:
            stream.push(dumps(error_body(500, "generation_failed", "generation failed")))
        stream.push("[DONE]")
        stream.finish()
        return


# ---------------------------------------------------------------------- GET …/{id}/stream (resume)


def _resume(svc: Services, store: CompletionStore, request: Request) -> Response:
    cid = request.path_params["cid"]
    after = -1
    last = request.headers.get("last-event-id")
    if last:
        prefix, _, n = last.strip().rpartition(":")
        if prefix != cid or not n.isdigit():
            raise ApiError(400, "invalid_value", f"Last-Event-ID must look like '{cid}:<n>'", "Last-Event-ID")
        after = int(n)
    stream = store.get(cid, _owner(svc, request))
    if stream is None:
        raise ApiError(
            404,
            "completion_not_found",
            "no resumable stream with this id: it finished, expired or never existed",
            "completion_id",
        )
    if after >= stream.count:
        raise ApiError(400, "invalid_value", f"event {after} of this stream has not been sent", "Last-Event-ID")
    if not stream.covers(after):
        raise ApiError(410, "resume_failed", "the events after Last-Event-ID are no longer buffered", "Last-Event-ID")
    svc.metrics.resumes.inc()
    return SseResponse(store, stream, after)
