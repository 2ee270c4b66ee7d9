"""The shell of a Realtime session that outlives its socket: it feeds the ``Session`` and runs its actions.

It hands the sans-I/O ``Session`` every input through its one door (``Session.handle``: client events, the
engine's chunks, speech, images, MCP answers) and runs the actions that come back (generation,
synthesis, media, tools). Generation is decoupled from the WebSocket: a ``LiveSession`` keeps running
when its socket drops, for the configured grace period, so a client can reconnect with its resume
token and ``last_seq`` and get every event it missed (``gateway.realtime.replay``). At most one socket
is attached at a time; the newer one wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from models import constrain, toolcalls
from models.backend import Parking
from models.constrain import GrammarError
from models.decode import ContextOverflow, JobEvents
from models.engine_client import EngineBusy, Handle
from models.image_events import Failed

from ..core.engine_events import AsyncSink
from ..core.filters import FILTER_FAILED, ResponseFilter
from ..core.grammars import CompileBusy, off_loop
from ..core.services import Services
from ..core.session_registry import Attachment, Mirrored
from ..core.tokenize import prompt_tokens
from ..core.uploads import REFUSALS
from ..tools.runner import McpRunner
from ..voice.speaker import Speaker
from ..voice.speech_actions import PlayAudio, Played, Speak
from . import inputs as i
from . import key_binding as keyed
from . import protocol as p
from .actions import (
    Action,
    AppendAudio,
    CancelResponse,
    ClearAudio,
    CommitAudio,
    Output,
    Refused,
    ResolveItem,
    StartImage,
    StartResponse,
)
from .bigframes import ParseLimits, parse_checked
from .defaults import session_defaults
from .idle import IdleTimer
from .image_jobs import ImageJobs
from .image_output import ImageProgress
from .item_parts import resolve_item
from .media import MediaInput
from .replay import ReplayBuffer
from .responses import usage_of
from .session import Session
from .speculation import AfterPrepare, PreparedReply, TokenizingHandle
from .speech_out import prefetch_text
from .timing import SessionTiming

log = logging.getLogger("stream_omni.live")


ModelMessage = tuple[str, JobEvents | ImageProgress]  # (response id, what the model produced)


class LiveSession:
    def __init__(
        self,
        services: Services,
        key: str,
        token: str | None = None,
        replay: tuple[list[tuple[int, str]], int] | None = None,
        transcribe: bool = False,
        grant: keyed.Grant | None = None,  # an ek_ key's: its config applied and fixed (keyed.PresetRefused)
        headers: Mapping[str, str] | None = None,  # the opening request's: a traceparent parents the session's trace
    ):
        """``key``: digest of the API key the session is bound to (``gateway.core.security.key_digest``).
        ``token``, ``replay``: a session that exists already (taken over from another replica): its
        resume token, and the events it sent (seq, JSON text) with the next seq — nothing is announced.
        ``transcribe``: a transcription session (``?intent=transcription``)."""
        self.svc = services
        self.limits = services.config.limits
        self.outbox = ReplayBuffer(self.limits.replay_max_events, self.limits.replay_max_bytes)
        if replay is not None:
            self.outbox.load(*replay)
        self.mirror: Mirrored | None = None
        self.changed = asyncio.Event()  # set whenever the outbox grows
        self.session = Session(session_defaults(services), self.outbox.stamp, transcribe)
        self.state = services.backend.new_state()
        self.handles: dict[str, Handle | TokenizingHandle] = {}
        self.filters: dict[str, ResponseFilter] = {}  # response id → its chunk filtering
        self.model_q: asyncio.Queue[ModelMessage] = asyncio.Queue()
        self.media = MediaInput(self.session, services, self.send, self)
        self.idle = IdleTimer(self.media.idle_timeout, self._idle_fired)
        self.speculation: PreparedReply | None = None
        self._preparing: asyncio.Task[None] | None = None  # a reply being tokenized to be prepared unseen
        self._preparing_key: int | None = None  # its turn, while it may still be submitted
        self.speaker = Speaker(
            services.speech,
            lambda r: self.send(self.session.handle(i.SpeechMade(r))),
            services.config.audio.output.lead_s,
            lambda: services.engine.depth[0] > 0,
            key,
        )
        self._ignored: set[str] = set()  # dropped speculations: their late events mean nothing
        self._alias: dict[str, str] = {}  # an adopted speculation's job id → the response it became
        self.tools = McpRunner(  # MCP calls
            self,
            self.session,
            services.config.tools,
            services.backend,
            key,
            services.mcp_seats,
            services.metrics.mcp_connections,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._media_lock = asyncio.Lock()
        self.images = ImageJobs(self.svc.image_gen, self.model_q)
        self.token = token or secrets.token_urlsafe(32)
        self.key = key
        self.attached: Attachment | None = None  # the Connection currently serving this session
        self.on_event: Callable[[], None] | None = None  # the attached connection's lag check
        self.taps: list[Callable[[list[dict[str, Any]]], None]] = []  # its sent events, to a WebRTC call (barge-in)
        self.timing = SessionTiming(services.tracing, self.session, self.media, self.speaker, self.taps, headers)
        self.closed = False
        self.received = 0  # client frames read from any of its sockets (session.resumed's received_events)
        keyed.bind(services, key, self.session, self.media, grant)  # before any task, and session.created
        self._pump = asyncio.create_task(self._pump_loop(), name="session-pump")
        if replay is None:
            grace = services.config.server.grace_period_s
            self.send(self.session.handle(i.Opened({"token": self.token, "expires_in_s": grace})))

    @property
    def deliverable(self) -> int:
        """The last seq a socket may send: all stamped ones, or with a store only those it holds."""
        m = self.mirror
        return m.mirrored if m is not None and m.holding else self.outbox.next_seq - 1

    # ------------------------------------------------------------------ outbound

    def send(self, out: Output) -> None:
        """Events are already stamped (seq) and kept by the outbox; wake the writer."""
        if out.events:
            self.idle.seen(out.events)
            if self.mirror is not None:
                self.mirror.wake()  # the sockets wake once the store holds them …
            if self.mirror is None or not self.mirror.holding:  # … or now, without one
                self.changed.set()
            if self.on_event is not None:
                self.on_event()
            for tap in list(self.taps):
                tap(out.events)
        for action in out.actions:
            self._act(action)

    def _idle_fired(self, now_ms: int) -> None:
        if not self.closed:  # the session answers, held behind pending items like any reply
            self.send(self.session.handle(i.IdleTimedOut(f"item_{secrets.token_hex(8)}", now_ms)))

    # ------------------------------------------------------------------ actions

    def _act(self, action: Action) -> None:
        if isinstance(action, CancelResponse):
            handle = self.handles.pop(action.response_id, None)
            if handle is not None:
                handle.cancel()
                self.svc.metrics.cancels.inc()
            self.images.cancel(action.response_id)
            self.speaker.cancel(action.response_id)  # deltas and synthesis stop now
            self.media.stop_playback()  # the client stops playing it: no more echo of it to cancel
            self.tools.cancel(action.response_id)
        elif isinstance(action, Speak | PlayAudio):  # synthesis, or a call's track
            self.speaker.submit(action)
        elif isinstance(action, Played):
            self.media.played(action.audio, action.format)
        elif isinstance(action, StartResponse):
            self._start(action)
        elif isinstance(action, StartImage):
            self._start_image(action)
        elif isinstance(action, AppendAudio):
            self.media.append(action.audio, action.event_id)
        elif isinstance(action, CommitAudio):
            self.media.commit(action.event_id)
        elif isinstance(action, ClearAudio):
            self.media.clear()
        elif isinstance(action, ResolveItem):  # serialised behind earlier items by the media lock
            self._spawn(self.timing.resolving(self._item_with_media(action.event, action.key), action.event))
        elif isinstance(action, Refused):
            self.svc.metrics.errors.labels(code=action.code).inc()
        else:  # MCP listings and calls (gateway.tools)
            self.tools.act(action)

    def _start_image(self, action: StartImage) -> None:
        if not self.images.start(action):
            msg = "image output is not enabled on this server"
            self.send(self.session.handle(i.Report("image_generation_disabled", msg)))
            self.send(self.session.handle(i.ImageProgressed(action.response_id, action.item_id, Failed(msg))))

    def _start(self, action: StartResponse) -> None:
        if self._preparing is not None:  # the reply to this turn may be a moment from prepared: wait for it
            waiting = AfterPrepare()
            self.handles[action.response_id] = waiting  # a cancel or close meanwhile marks it
            self._spawn(self._after_prepare(action, waiting, self._preparing))
            return
        spec, self.speculation = self.speculation, None
        if spec is not None:
            if spec.serves(action):
                self._adopt(spec, action.response_id)
                return
            self.svc.metrics.speculation.labels(outcome="mismatched").inc()
            self._forget(spec)  # the engine retires a cancelled job before the next one touches the cache
        pending = TokenizingHandle()
        self.handles[action.response_id] = pending  # a cancel or close meanwhile marks it
        self._spawn(self._submit(action, pending))

    async def _submit(self, action: StartResponse, pending: TokenizingHandle) -> None:
        """Tokenize off the loop (gateway.core.tokenize), then hand the job to the engine — unless the
        response was cancelled meanwhile (the session already ended it with response.done)."""
        svc = self.svc
        rid = action.response_id
        try:
            grammar = action.tools.grammar  # forced calls: compiled on the grammar thread (gateway.core.grammars)
            messages = toolcalls.render(action.messages, action.tools.tools)
            constraint = await off_loop(constrain.constraint_for, svc.backend, grammar) if grammar else None
            prompt = await prompt_tokens(svc, messages)
            if pending.cancelled or self.handles.get(rid) is not pending:
                return
            self.timing.submitted(rid)  # before the job exists: the engine may start it before submit returns
            job = svc.decode_job(self.state, messages, action.sampling, action.scheduler, prompt, constraint)
            self.handles[rid] = svc.engine.submit(job, AsyncSink(asyncio.get_running_loop(), self.model_q, rid))
            self.filters[rid] = ResponseFilter(svc.filters, self.session.id, rid)
        except ContextOverflow as exc:
            self.send(self.session.handle(i.StartFailed(rid, "context_length_exceeded", str(exc))))
        except (EngineBusy, CompileBusy):
            self.send(self.session.handle(i.StartFailed(rid, "server_busy")))
        except GrammarError as exc:  # a backend without a tokenizer a grammar can use
            msg = f"forced tool calls are not available here: {exc}"
            self.send(self.session.handle(i.StartFailed(rid, "unsupported_value", msg)))
        except ValueError as exc:  # bad scheduler/sampling values
            self.send(self.session.handle(i.StartFailed(rid, "invalid_value", str(exc))))
        except Exception as exc:  # a tokenizer failure costs this response, not the session
            log.error("starting a response failed: %s", type(exc).__name__)
            self.send(self.session.handle(i.StartFailed(rid, "server_error")))
        finally:
            if self.handles.get(rid) is pending:
                del self.handles[rid]  # not submitted: nothing runs for it

    # ------------------------------------------------------------------ speculation (media.Speculator)

    def prepare(self, key: int, transcript: str) -> None:
        """Start the reply to a user turn saying ``transcript``, unseen, if nothing else runs."""
        if self.speculation is not None:
            self._forget(self.speculation)
            self.speculation = None
        self._preparing_key = None  # one still tokenizing is superseded: it will not be submitted
        action = self.session.preview_response(transcript)
        if action is None or self.handles or self.closed or not self.svc.engine_has_room():
            return
        if action.tools.tools or action.tools.grammar:  # a reply that may call tools is not prepared unseen
            return
        self._preparing_key = key
        self._preparing = self._spawn(self._prepare(key, action))

    async def _prepare(self, key: int, action: StartResponse) -> None:
        """Tokenize off the loop, as every response is, then submit unseen, unless the turn moved on
        meanwhile (speech resumed, another pause) or something else started."""
        svc, rid = self.svc, action.response_id
        try:
            prompt = await prompt_tokens(svc, action.messages)
            others = any(not isinstance(h, AfterPrepare) for h in self.handles.values())
            if self._preparing_key != key or others or self.closed:
                return
            job = svc.decode_job(self.state, action.messages, action.sampling, action.scheduler, prompt)
            handle = svc.engine.submit(job, AsyncSink(asyncio.get_running_loop(), self.model_q, rid))
        except (ContextOverflow, EngineBusy, ValueError):
            return  # the real response will meet (and report) the same problem, or start normally
        finally:
            if self._preparing_key == key:
                self._preparing_key = None
            if self._preparing is asyncio.current_task():
                self._preparing = None
        self.speculation = PreparedReply(key, action, handle)
        self.svc.metrics.speculation.labels(outcome="prepared").inc()

    async def _after_prepare(self, action: StartResponse, waiting: AfterPrepare, prep: asyncio.Task[None]) -> None:
        with contextlib.suppress(Exception):  # its failure was logged; the response starts normally
            await asyncio.shield(prep)
        if self.handles.get(action.response_id) is waiting:
            del self.handles[action.response_id]
            if not waiting.cancelled and not self.closed:
                self._start(action)

    def drop(self, key: int) -> None:
        """Speech resumed: the prepared reply goes, silently (its job is cancelled within a step)."""
        if self._preparing_key == key:
            self._preparing_key = None  # still tokenizing: it will not be submitted
        spec = self.speculation
        if spec is not None and spec.key == key:
            self.speculation = None
            self._forget(spec)
            self.svc.metrics.speculation.labels(outcome="discarded").inc()

    def _forget(self, spec: PreparedReply) -> None:
        spec.handle.cancel()
        self.speaker.forget()  # its first audio, if prepared, is never heard
        if not spec.finished:  # its last events are still to come
            self._ignored.add(spec.action.response_id)

    def _adopt(self, spec: PreparedReply, rid: str) -> None:
        """The turn committed as predicted: the prepared job becomes response ``rid``."""
        self.svc.metrics.speculation.labels(outcome="committed").inc()
        job_id = spec.action.response_id
        self.timing.adopted(spec, rid)
        self.handles[rid] = spec.handle
        self.filters[rid] = ResponseFilter(self.svc.filters, self.session.id, rid)  # seen like any reply
        if not spec.finished:
            self._alias[job_id] = rid
        for events in spec.events:  # what it made so far goes out now, in order
            self._on_job(rid, events)

    # ------------------------------------------------------------------ inbound

    def parse(self, raw: str | bytes) -> Any:
        """A client event, or the ``ProtocolError`` it raised (pure: safe on a worker thread)."""
        return parse_checked(raw, ParseLimits.of(self.limits))  # the same as a parse process's

    def frame_refused(self, tell: bool) -> None:
        """A client frame its socket's rate refused: counted as read (the client must not resend it),
        and said so when ``tell`` (not on every frame of a flood)."""
        self.svc.metrics.errors.labels(code="rate_limited").inc()
        if tell:
            self.send(self.session.handle(i.Report("rate_limited", "too many messages; slow down")))
        self.received += 1

    def on_text(self, raw: str) -> None:
        self.on_parsed(self.parse(raw))

    def on_parsed(self, ev: Any) -> None:
        """Act on what ``parse`` returned, in the order frames arrived."""
        if isinstance(ev, p.ProtocolError):
            self.svc.metrics.errors.labels(code=ev.code).inc()
            self.send(self.session.handle(i.Report(ev.code, ev.message, ev.event_id, ev.param)))
            return
        if isinstance(ev, p.SessionUpdate):  # its audio settings are the voice layer's to check, first
            refused = self.media.check_update(ev)
            if refused is not None:
                self.send(refused)
                return
            self.send(self.session.handle(ev))
            self.tools.prune()  # servers the update dropped are closed
            return
        self.send(self.session.handle(ev))

    async def _item_with_media(self, ev: p.ItemCreate, key: str) -> None:
        """Resolve audio parts to transcripts and images to descriptions, then add the item.

        Items keep their order, and a response.create that arrives meanwhile waits for them.
        """
        owner = self.key if self.svc.config.server.api_keys else ""  # "" on a server without keys
        resolved = None
        try:
            async with self._media_lock:
                resolved = await resolve_item(self.svc, owner, ev, self.media.resolve_audio_part)
        except REFUSALS as exc:
            self.svc.metrics.errors.labels(code=exc.code).inc()
            self.send(self.session.handle(i.Report(exc.code, exc.message, ev.event_id, "item.content")))
        finally:
            self.send(self.session.handle(i.ItemResolved(key, resolved)))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("session task failed: %s", type(task.exception()).__name__)

    def on_bytes(self, data: bytes) -> None:
        self.media.append(data)

    # ------------------------------------------------------------------ model results

    async def _pump_loop(self) -> None:
        while True:
            rid, events = await self.model_q.get()
            try:
                self._on_model(rid, events)
            except Exception:  # never lose the pump: later responses depend on it
                log.exception("handling model events failed")

    def _on_model(self, rid: str, events: JobEvents | ImageProgress) -> None:
        if isinstance(events, ImageProgress):
            ev = events.event
            if isinstance(ev, Failed):
                log.warning("image generation failed: %s", ev.message)
            self.images.ended(rid, ev)
            self.send(self.session.handle(i.ImageProgressed(rid, events.item_id, ev)))
            return
        spec = self.speculation
        if spec is not None and rid == spec.action.response_id:
            spec.events.append(events)  # not a response yet: held until the turn commits
            self.speaker.prefetch(prefetch_text(self.session, spec.action, spec.events))  # its first audio too
        elif rid in self._ignored:
            if events.done is not None:
                self._ignored.discard(rid)
        else:
            self._on_job(self._alias.pop(rid, rid) if events.done else self._alias.get(rid, rid), events)

    def _on_job(self, rid: str, events: JobEvents) -> None:
        """A response's engine events → server events."""
        flt = self.filters.get(rid)
        for chunk in events.chunks:
            text = chunk.text if flt is None or not chunk.text else flt.check(chunk.text)
            if text is None:  # a filter stopped it: the job's done (within a step) ends the response
                handle = self.handles.get(rid)
                if handle is not None:
                    handle.cancel()
            elif text:
                self.send(self.session.handle(i.EngineChunk(rid, text)))
        for prompt in [] if flt is not None and flt.stopped else events.requests:  # never shown as text
            self.send(self.session.handle(i.ImageRequested(rid, prompt)))
        for body in events.tool_calls:  # the model called a function: never shown as text
            self.send(self.session.handle(i.ToolCallCut(rid, body)))
        if events.done is not None:
            self.handles.pop(rid, None)
            self.filters.pop(rid, None)
            m = events.done.metrics
            usage = usage_of(m)
            if usage:
                self.svc.metrics.observe_response(m)
            reason = events.done.reason if flt is None or flt.reason is None else flt.reason
            if flt is not None and flt.error is not None:
                self.send(self.session.handle(i.Report(FILTER_FAILED, flt.error)))
                m = {**m, "error_code": FILTER_FAILED}
            self.send(self.session.handle(i.Finished(rid, reason, m, usage)))

    # ------------------------------------------------------------------ lifecycle

    @property
    def busy(self) -> bool:
        return bool(self.handles) or self.session.response is not None

    def park(self) -> None:
        """Its socket is gone: a new conversation may take its KV slot first (``Parking``); a
        resume that finds the slot taken re-prefills, one that does not goes on where it was."""
        self.media.release_seat()  # a detached session sends no audio: its voice seat is another's
        backend = self.svc.backend
        if isinstance(backend, Parking) and not self.closed:
            with contextlib.suppress(EngineBusy):  # shutting down: nothing to keep anyway
                self.svc.engine.call(backend.park, self.state)

    def close(self, reason: str = "session_closed") -> None:
        """Free everything: cancel generation, stop tasks."""
        if self.closed:
            return
        self.closed = True
        self.idle.stop()
        self.send(self.session.handle(i.Cancel(reason)))
        if self.speculation is not None:
            self.speculation.handle.cancel()
            self.speculation = None
        for handle in self.handles.values():
            handle.cancel()
        self.handles.clear()
        self.media.close()
        self.speaker.close()
        self.timing.close()
        self._pump.cancel()
        for t in list(self._tasks):
            t.cancel()
        self._spawn(self.tools.close())
        self.changed.set()
        if self.mirror is not None:
            self.mirror.wake()  # its last events, then its end, reach the store
