"""OpenAI-compatible HTTP API routes: chat and text completions (with SSE resume), audio speech and
transcriptions, Realtime client secrets and files; each behind the same key guard.

``POST /v1/chat/completions`` takes OpenAI's request body (see ``gateway.http.schemas``) and
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

import logging
import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..core.security import bearer, http_api_key_ok, key_digest
from ..core.services import Services
from . import audio_speech, chat_completions, client_secrets, completions, transcriptions
from . import files_api as files
from .budget import ByteBudget
from .error_bodies import ApiError, error_response
from .schemas import header_count
from .sse import CompletionStore, SseResponse

log = logging.getLogger("stream_omni.http")

Handler = Callable[[Services, Request], Awaitable[Response]]


class HttpApi:
    """The HTTP routes and the streamed completions they keep for resume (drained on shutdown)."""

    def __init__(self, services: Callable[[], Services]):
        self.services = services  # the app's Services once started
        self.store = CompletionStore()
        self._budget: ByteBudget | None = None  # built from the config on the first POST
        self.transcriptions = transcriptions.Transcriptions()  # POST /v1/audio/transcriptions, its running count

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/chat/completions", self._guarded(self._create), methods=["POST"]),
            Route("/v1/chat/completions/{cid}/stream", self._guarded(self._resume), methods=["GET"]),
            Route("/v1/completions", self._guarded(self._create_text), methods=["POST"]),
            Route("/v1/completions/{cid}/stream", self._guarded(self._resume), methods=["GET"]),
            Route("/v1/audio/speech", self._guarded(audio_speech.speech), methods=["POST"]),
            Route("/v1/audio/transcriptions", self._guarded(self.transcriptions.create), methods=["POST"]),
            Route("/v1/realtime/client_secrets", self._guarded(client_secrets.create), methods=["POST"]),
            Route("/v1/files", self._guarded(self._owned(files.upload)), methods=["POST"]),
            Route("/v1/files", self._guarded(self._owned(files.listing)), methods=["GET"]),
            Route("/v1/files/{file_id}", self._guarded(self._owned(files.retrieve)), methods=["GET"]),
            Route("/v1/files/{file_id}", self._guarded(self._owned(files.delete)), methods=["DELETE"]),
            Route("/v1/files/{file_id}/content", self._guarded(self._owned(files.content)), methods=["GET"]),
        ]

    def _guarded(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            svc = self.services()
            try:
                if not http_api_key_ok(request, svc.config.server.api_keys):
                    raise ApiError(
                        401,
                        "invalid_api_key",
                        "invalid or missing API key (Authorization: Bearer …)",
                        headers={"WWW-Authenticate": "Bearer"},
                    )
                if request.method == "POST":
                    self._spend(svc, request)
                return await handler(svc, request)
            except ApiError as exc:
                svc.metrics.errors.labels(code=exc.code).inc()
                return error_response(exc)
            except Exception as exc:  # a bug costs this request, not the server, and says nothing inside
                log.error("chat completion failed: %s", type(exc).__name__, exc_info=True)
                svc.metrics.errors.labels(code="server_error").inc()
                return error_response(ApiError(500, "server_error", "the server failed to handle this request"))

        return endpoint

    def _spend(self, svc: Services, request: Request) -> None:
        """The key's body-byte budget (``gateway.http.budget``): 429 before the body is read when spent."""
        limits = svc.config.limits
        if limits.http_bytes_per_s_per_key is None:
            return
        if self._budget is None:
            burst = max(limits.max_http_body_bytes, svc.config.files.max_file_bytes + files.FORM_OVERHEAD)
            self._budget = ByteBudget(limits.http_bytes_per_s_per_key, burst)
        declared = request.headers.get("content-length")
        wait = self._budget.admit(_owner(svc, request), header_count(declared) if declared else None, time.monotonic())
        if wait:
            raise ApiError(
                429,
                "rate_limit_exceeded",
                "this key sent more request bytes than limits.http_bytes_per_s_per_key allows; retry later",
                # close: the server answers without reading the body, and does not read it after either
                headers={"Retry-After": str(int(wait)), "Connection": "close"},
            )

    async def _create(self, svc: Services, request: Request) -> Response:
        return await chat_completions.create(svc, self.store, request, _owner(svc, request))

    @staticmethod
    def _owned(handler: Callable[[Services, Request, str], Awaitable[Response]]) -> Handler:
        async def run(svc: Services, request: Request) -> Response:
            return await handler(svc, request, _owner(svc, request))

        return run

    async def _create_text(self, svc: Services, request: Request) -> Response:
        return await completions.create(svc, self.store, request, _owner(svc, request))

    async def _resume(self, svc: Services, request: Request) -> Response:
        cid = request.path_params["cid"]
        after = -1
        last = request.headers.get("last-event-id")
        if last:
            prefix, _, n = last.strip().rpartition(":")
            seq = header_count(n)
            if prefix != cid or seq is None:
                raise ApiError(400, "invalid_value", f"Last-Event-ID must look like '{cid}:<n>'", "Last-Event-ID")
            after = seq
        stream = self.store.get(cid, _owner(svc, request))
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
            raise ApiError(
                410, "resume_failed", "the events after Last-Event-ID are no longer buffered", "Last-Event-ID"
            )
        svc.metrics.resumes.inc()
        return SseResponse(self.store, stream, after)


def _owner(svc: Services, request: Request) -> str:
    """Who may resume a stream: the API key that started it (anyone, when the server has no keys)."""
    return key_digest(bearer(request)) if svc.config.server.api_keys else ""
