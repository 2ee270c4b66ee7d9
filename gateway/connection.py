"""The per-socket loop for /v1/realtime: one reader task, one pump for model results, one bounded writer.

Thin I/O around the sans-I/O ``Session``. The reader never waits on the model, so pings and
``response.cancel`` are read while a response decodes. Every task is cancelled in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from models.decode import ContextOverflow, DecodeJob, JobEvents
from models.engine import AsyncSink, EngineBusy, Handle
from processors.audio import AudioError

from . import protocol as p
from .media import MediaInput
from .session import CancelResponse, Output, Session, StartResponse

if TYPE_CHECKING:
    from .app import Services

log = logging.getLogger("stream_omni.connection")

CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_TRY_AGAIN = 1013


class SlowConsumer(Exception):
    """The client stopped reading; its outbound queue is full."""


class Connection:
    def __init__(self, ws: WebSocket, services: Services):
        self.ws = ws
        self.svc = services
        self.limits = services.config.limits
        self.out_q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=self.limits.outbound_queue)
        self.model_q: asyncio.Queue[tuple[str, JobEvents]] = asyncio.Queue()
        self._seq = 0
        self.session = Session(services.session_defaults, self._stamp)
        self.state = services.backend.new_state()
        self.handles: dict[str, Handle] = {}
        self._closing: tuple[int, str] | None = None
        self.media = MediaInput(self.session, services, self.send)
        self.media.svc_start = self._create_response
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ outbound

    def _stamp(self, event: dict[str, Any]) -> dict[str, Any]:
        event["seq"] = self._seq
        self._seq += 1
        return event

    def send(self, out: Output) -> None:
        for event in out.events:
            try:
                self.out_q.put_nowait(event)
            except asyncio.QueueFull:
                raise SlowConsumer from None
        for action in out.actions:
            self._act(action)

    async def _writer(self) -> None:
        while True:
            event = await self.out_q.get()
            if event is None:
                return
            await self.ws.send_text(json.dumps(event, ensure_ascii=False, separators=(",", ":")))

    # ------------------------------------------------------------------ actions

    def _act(self, action: Any) -> None:
        if isinstance(action, CancelResponse):
            handle = self.handles.pop(action.response_id, None)
            if handle is not None:
                handle.cancel()
                self.svc.metrics.cancels.inc()
        elif isinstance(action, StartResponse):
            self._start(action)

    def _start(self, action: StartResponse) -> None:
        svc = self.svc
        rid = action.response_id
        try:
            prompt = svc.backend.chat_tokens(action.messages)
            job = DecodeJob(
                svc.backend,
                self.state,
                prompt,
                svc.sampling(action.sampling),
                svc.scheduler_config(action.scheduler),
                *svc.drafting(),
            )
            self.handles[rid] = svc.engine.submit(job, AsyncSink(asyncio.get_running_loop(), self.model_q, rid))
        except ContextOverflow as exc:
            self.send(self.session._error("context_length_exceeded", str(exc)))
            self.send(self.session.on_done(rid, "error", {"error_code": "context_length_exceeded"}, {}))
        except EngineBusy:
            self.send(self.session.on_done(rid, "error", {"error_code": "server_busy"}, {}))
        except ValueError as exc:  # bad scheduler/sampling values
            self.send(self.session._error("invalid_value", str(exc)))
            self.send(self.session.on_done(rid, "error", {"error_code": "invalid_value"}, {}))

    # ------------------------------------------------------------------ model results

    async def _pump(self) -> None:
        while True:
            rid, events = await self.model_q.get()
            for chunk in events.chunks:
                self.send(self.session.on_chunk(rid, chunk.text))
            if events.done is not None:
                self.handles.pop(rid, None)
                m = events.done.metrics
                usage = {}
                if "tokens" in m:
                    prompt = m.get("prompt_tokens", 0) + m.get("cached_tokens", 0)
                    usage = {
                        "total_tokens": prompt + m["tokens"],
                        "input_tokens": prompt,
                        "output_tokens": m["tokens"],
                        "input_token_details": {"cached_tokens": m.get("cached_tokens", 0)},
                    }
                    self.svc.metrics.observe_response(m)
                self.send(self.session.on_done(rid, events.done.reason, m, usage))

    # ------------------------------------------------------------------ inbound

    def _on_text(self, raw: str) -> None:
        try:
            ev = p.parse(raw, self.limits.max_json_depth)
        except p.ProtocolError as exc:
            self.svc.metrics.errors.labels(code=exc.code).inc()
            self.send(self.session._error(exc.code, exc.message, exc.event_id, exc.param))
            return
        if isinstance(ev, p.AudioAppend):
            self.media.append(ev.audio, ev.event_id)
        elif isinstance(ev, p.AudioCommit):
            self.media.commit(ev.event_id)
        elif isinstance(ev, p.AudioClear):
            self.media.clear()
        elif isinstance(ev, p.SessionUpdate):
            refused = self.media.check_update(ev)
            self.send(refused or self.session.handle(ev))
        elif isinstance(ev, p.ItemCreate) and any(not isinstance(c, p.InputText) for c in ev.item.content):
            self._spawn(self._item_with_media(ev))
        elif isinstance(ev, p.ResponseCreate):
            if not self.media.defer(ev):
                self._create_response(ev)
        else:
            self.send(self.session.handle(ev))

    def _create_response(self, ev: p.ResponseCreate) -> None:
        if self.session.response is None and not self.svc.engine_has_room():
            self.svc.metrics.errors.labels(code="server_busy").inc()
            self.send(self.session._error("server_busy", "the server is at capacity; retry shortly", ev.event_id))
            return
        self.send(self.session.handle(ev))

    async def _item_with_media(self, ev: p.ItemCreate) -> None:
        """Resolve audio parts to transcripts, then add the item (order kept per connection)."""
        parts: list[p.InputText | p.InputImage | p.InputAudio] = []
        try:
            for part in ev.item.content:
                if isinstance(part, p.InputAudio):
                    text = part.transcript or await self.media.resolve_audio_part(part.audio)
                    parts.append(p.InputText(type="input_text", text=text))
                elif isinstance(part, p.InputImage):
                    raise AudioError("unsupported_content", "image input is not enabled on this server")
                else:
                    parts.append(part)
        except AudioError as exc:
            self.send(self.session._error(exc.code, exc.message, ev.event_id, "item.content"))
            return
        resolved = ev.model_copy(update={"item": ev.item.model_copy(update={"content": parts})})
        self.send(self.session.handle(resolved))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and isinstance(task.exception(), SlowConsumer):
            self._closing = (CLOSE_TRY_AGAIN, "client is not reading; resume to continue")

    def _on_bytes(self, data: bytes) -> None:
        if len(data) > self.limits.max_binary_frame_bytes:
            self._closing = (CLOSE_TOO_BIG, "binary frame too large")
            return
        self.media.append(data)

    async def _reader(self) -> None:
        while self._closing is None:
            msg = await self.ws.receive()
            if msg["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(msg.get("code", 1000))
            try:
                if msg.get("text") is not None:
                    self._on_text(msg["text"])
                elif msg.get("bytes") is not None:
                    self._on_bytes(msg["bytes"])
            except SlowConsumer:
                raise
            except Exception as exc:  # a bug must cost one event, not the session
                log.error("handling a client event failed: %s", type(exc).__name__, exc_info=True)
                self.svc.metrics.errors.labels(code="server_error").inc()
                self.send(self.session._error("server_error", "the server failed to handle this event", None))

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        self.send(self.session.created())
        tasks = [
            asyncio.create_task(self._writer(), name="ws-writer"),
            asyncio.create_task(self._pump(), name="ws-pump"),
            asyncio.create_task(self._reader(), name="ws-reader"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                exc = t.exception()
                if isinstance(exc, SlowConsumer):
                    self._closing = (CLOSE_TRY_AGAIN, "client is not reading; resume to continue")
                elif exc is not None and not isinstance(exc, WebSocketDisconnect | OSError):
                    log.error("connection task %s failed: %s", t.get_name(), type(exc).__name__)
        finally:
            self.media.close()
            tasks += list(self._tasks)
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t
            for handle in self.handles.values():  # no resume yet: a dropped socket cancels
                handle.cancel()
            self.handles.clear()
            if self._closing and self.ws.client_state == WebSocketState.CONNECTED:
                with contextlib.suppress(Exception):
                    await self.ws.close(self._closing[0], self._closing[1])
