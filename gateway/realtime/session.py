"""Sans-I/O Realtime session: client events and engine results in, server events and actions out.

No asyncio, Starlette or torch. The connection feeds it parsed client events
(``handle``), scheduler chunks (``on_chunk``) and ends of generation (``on_done``); it returns
the server events to send (already stamped with a contiguous ``seq``) plus ``actions`` for the
I/O layer (start or cancel a generation). Illegal states raise ``RuntimeError`` naming the
expected and actual state.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..options import SchedulerOptions
from ..tools.session import McpOutput
from ..tools.state import McpPolicy, McpState
from ..tools.wire import McpApprovalResponseItem
from . import functions
from . import protocol as p
from .actions import Action, CancelResponse, Output, StartResponse
from .conversation import Conversation, Item, ItemError
from .images import ImageOutput
from .responses import ResponseState, final_events


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass(frozen=True)
class SessionDefaults:
    model: str  # served model id
    aliases: tuple[str, ...] = ()  # other ids accepted as session.model (config model.aliases)
    instructions: str | None = None  # system prompt when the client sets none
    temperature: float = 0.0  # 0 → greedy
    top_p: float = 1.0
    max_output_tokens: int = 512  # per response, unless the client asks for fewer
    output_modalities: tuple[str, ...] = ("text",)
    scheduler: dict[str, Any] = field(default_factory=dict)  # SchedulerOptions defaults
    max_items: int = 512  # conversation items kept per session
    mcp: McpPolicy = field(default_factory=McpPolicy)  # what MCP servers it may reach (config tools)


class Session(ImageOutput, McpOutput):
    def __init__(self, defaults: SessionDefaults, stamp: Callable[[dict[str, Any]], dict[str, Any]]):
        """``stamp`` gives each outgoing event its ``seq`` (and records it for replay)."""
        self.id = _new_id("sess")
        self.defaults = defaults
        self._stamp = stamp
        self.options = p.SessionOptions(
            type="realtime",
            model=defaults.model,
            instructions=defaults.instructions,
            output_modalities=list(defaults.output_modalities),  # type: ignore[arg-type]
            temperature=defaults.temperature,
            top_p=defaults.top_p,
            max_output_tokens=defaults.max_output_tokens,
            scheduler=SchedulerOptions(**defaults.scheduler) if defaults.scheduler else None,
        )
        self.conversation = Conversation(defaults.max_items)
        self.mcp = McpState(defaults.mcp)
        self.response: ResponseState | None = None
        self._pending: set[str] = set()  # items whose content is still being made (see item_pending)
        self._held: p.ResponseCreate | None = None  # a response.create waiting for them
        self.view_hook: Callable[[dict[str, Any]], None] | None = None  # fills in effective audio settings

    # ------------------------------------------------------------------ helpers

    def _out(self, *events: dict[str, Any], actions: list[Action] | None = None) -> Output:
        return Output([self._stamp(e) for e in events], actions or [])

    def error(self, code: str, message: str, event_id: str | None = None, param: str | None = None) -> Output:
        return self._out(p.error_event(code, message, event_id, param))

    def session_view(self) -> dict[str, Any]:
        view = self.options.model_dump(exclude_none=True)
        view.update(id=self.id, object="realtime.session")
        if self.view_hook is not None:
            self.view_hook(view)
        return view

    def created(self, extra: dict[str, Any] | None = None) -> Output:
        return self._out(p.server_event("session.created", session=self.session_view(), **(extra or {})))

    # ------------------------------------------------------------------ client events

    def handle(self, ev: p.ClientEvent) -> Output:
        """A parsed client event that the session itself answers (audio frames are the voice layer's)."""
        match ev:
            case p.SessionUpdate():
                return self._on_session_update(ev)
            case p.ItemCreate():
                return self._on_conversation_item_create(ev)
            case p.ItemDelete():
                return self._on_conversation_item_delete(ev)
            case p.ItemTruncate():
                return self._on_conversation_item_truncate(ev)
            case p.ResponseCreate():
                return self._on_response_create(ev)
            case p.ResponseCancel():
                return self._on_response_cancel(ev)
            case _:  # parsed, but belongs to another layer (audio buffer events)
                return self.error("unsupported_event", f"{ev.type} is not supported here", ev.event_id, "type")

    # ------------------------------------------------------------------ items still being resolved

    def item_pending(self, key: str) -> None:
        """An item (a transcript, an image description) is being made; responses wait for it."""
        self._pending.add(key)

    def want_response(self, ev: p.ResponseCreate) -> p.ResponseCreate | None:
        """``ev`` if it may start now; else it is held until every pending item has settled.

        One response per batch of items: while one is held, later ones are dropped (a VAD turn's
        automatic response and the client's own ``response.create`` for the same turn)."""
        if not self._pending:
            return ev
        if self._held is None:
            self._held = ev
        return None

    def settle(self, key: str) -> p.ResponseCreate | None:
        """Item ``key`` is resolved (or failed): the held ``response.create`` to start now, if any."""
        self._pending.discard(key)
        if self._pending or self._held is None:
            return None
        ev, self._held = self._held, None
        return ev

    def _on_session_update(self, ev: p.SessionUpdate) -> Output:
        if self.response is not None and ev.session.model not in (None, self.options.model):
            return self.error("invalid_value", "model cannot change during a response", ev.event_id)
        if ev.session.model not in (None, self.defaults.model, *self.defaults.aliases):
            return self.error(
                "model_not_found", f"model {ev.session.model!r} is not served here", ev.event_id, "session.model"
            )
        ev = self.mcp_strip(ev)
        patch = ev.session.model_dump(exclude_unset=True)
        merged = self.options.model_dump(exclude_unset=False)
        for key, value in patch.items():
            if key == "scheduler" and value is not None and merged.get("scheduler"):
                merged["scheduler"] = {**merged["scheduler"], **{k: v for k, v in value.items() if v is not None}}
            else:
                merged[key] = value
        options = p.SessionOptions.model_validate(merged)
        try:
            # the tools' schemas only: tool_choice against the tools is checked when a response uses them, as
            # LiveKit (written against OpenAI) sends tool_choice in its first session.update, its tools in a later one
            self.mcp.plan(options.tools, None, "session")
        except functions.ToolError as exc:  # the session keeps its options
            return self.error("invalid_value", exc.message, ev.event_id, exc.param)
        self.options = options
        out = self._out(p.server_event("session.updated", session=self.session_view()))
        return out.extend(self.mcp_list(options.tools)) if "tools" in patch else out

    @property
    def items(self) -> list[Item]:
        return self.conversation.items

    def add_item(self, item: Item, previous_item_id: str | None = None, event_id: str | None = None) -> Output:
        """Insert a finished conversation item (also used for audio transcripts)."""
        try:
            prev = self.conversation.insert(item, previous_item_id)
        except ItemError as exc:
            return self.error(exc.code, exc.message, event_id, exc.param)
        return self._out(
            p.server_event("conversation.item.added", previous_item_id=prev, item=item),
            p.server_event("conversation.item.done", previous_item_id=prev, item=item),
        )

    def _on_conversation_item_create(self, ev: p.ItemCreate) -> Output:
        if isinstance(ev.item, p.FunctionCallOutputItem):
            if ev.item.call_id not in functions.call_ids(self.items):
                return self.error("invalid_value", f"no function call {ev.item.call_id!r}", ev.event_id, "item.call_id")
            return self.add_item(functions.output_item(ev.item), ev.previous_item_id, ev.event_id)
        if isinstance(ev.item, McpApprovalResponseItem):
            return self.mcp_approval(ev, self.add_item)
        if isinstance(ev.item, p.FunctionCallItem):
            call = functions.call_item(ev.item.call_id, ev.item.name, ev.item.arguments, "completed", ev.item.id)
            return self.add_item(call, ev.previous_item_id, ev.event_id)
        parts: list[dict[str, Any]] = []
        for part in ev.item.content:
            if isinstance(part, p.InputText):
                kind = "output_text" if ev.item.role == "assistant" else "input_text"
                parts.append({"type": kind, "text": part.text})
            else:  # images and audio are turned into text by the connection's processors
                return self.error(
                    "unsupported_content",
                    f"content type {part.type} is not enabled on this server",
                    ev.event_id,
                    "item.content",
                )
        item = {
            "id": ev.item.id or _new_id("item"),
            "object": "realtime.item",
            "type": "message",
            "role": ev.item.role,
            "status": "completed",
            "content": parts,
        }
        return self.add_item(item, ev.previous_item_id, ev.event_id)

    # ------------------------------------------------------------------ voice input

    def speech_started(self, item_id: str, audio_start_ms: int) -> Output:
        return self._out(
            p.server_event("input_audio_buffer.speech_started", audio_start_ms=audio_start_ms, item_id=item_id)
        )

    def speech_stopped(self, item_id: str, audio_end_ms: int) -> Output:
        return self._out(
            p.server_event("input_audio_buffer.speech_stopped", audio_end_ms=audio_end_ms, item_id=item_id)
        )

    def audio_committed(self, item_id: str) -> Output:
        """A user audio turn enters the conversation; its transcript follows."""
        prev = self.conversation.last_id
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "in_progress",
            "content": [{"type": "input_audio", "transcript": None}],
        }
        self.conversation.append(item)
        return self._out(
            p.server_event("input_audio_buffer.committed", previous_item_id=prev, item_id=item_id),
            p.server_event("conversation.item.added", previous_item_id=prev, item=item),
        )

    def audio_cleared(self) -> Output:
        return self._out(p.server_event("input_audio_buffer.cleared"))

    def transcript_delta(self, item_id: str, delta: str) -> Output:
        return self._out(
            p.server_event(
                "conversation.item.input_audio_transcription.delta", item_id=item_id, content_index=0, delta=delta
            )
        )

    def transcript_done(self, item_id: str, transcript: str) -> Output:
        item = self.conversation.get(item_id)
        if item is None:  # deleted meanwhile
            return Output()
        item["content"][0]["transcript"] = transcript
        item["status"] = "completed"
        return self._out(
            p.server_event(
                "conversation.item.input_audio_transcription.completed",
                item_id=item_id,
                content_index=0,
                transcript=transcript,
            ),
            p.server_event("conversation.item.done", item=item),
        )

    def transcript_failed(self, item_id: str, code: str, message: str) -> Output:
        item = self.conversation.get(item_id)
        if item is not None:
            item["status"] = "incomplete"
            item["content"][0]["transcript"] = ""
        return self._out(
            p.server_event(
                "conversation.item.input_audio_transcription.failed",
                item_id=item_id,
                content_index=0,
                error={"type": "transcription_error", "code": code, "message": message},
            )
        )

    def _on_conversation_item_delete(self, ev: p.ItemDelete) -> Output:
        try:
            self.conversation.delete(ev.item_id)
        except ItemError as exc:
            return self.error(exc.code, exc.message, ev.event_id, exc.param)
        return self._out(p.server_event("conversation.item.deleted", item_id=ev.item_id))

    def _on_conversation_item_truncate(self, ev: p.ItemTruncate) -> Output:
        if self.conversation.find(ev.item_id) < 0:
            return self.error("item_not_found", f"item {ev.item_id} not found", ev.event_id, "item_id")
        # text-only output: nothing to truncate, but the event is acknowledged as OpenAI does
        return self._out(
            p.server_event(
                "conversation.item.truncated",
                item_id=ev.item_id,
                content_index=ev.content_index,
                audio_end_ms=ev.audio_end_ms,
            )
        )

    def messages(self, extra_instructions: str | None = None) -> list[dict[str, str]]:
        """The conversation as chat messages, after the session's (or these) instructions."""
        system = extra_instructions if extra_instructions is not None else self.options.instructions
        return self.conversation.messages(system)

    def _plan(self, ev: p.ResponseCreate, rid: str, extra: list[dict[str, str]]) -> tuple[StartResponse, Any] | Output:
        """The generation ``ev`` asks for (messages, sampling, scheduler), or the error it gets."""
        opts = ev.response or p.ResponseOptions()
        s = self.options

        def pick(name: str) -> Any:
            v = getattr(opts, name)
            return v if v is not None else getattr(s, name)

        max_out = pick("max_output_tokens")
        cap = self.defaults.max_output_tokens
        max_tokens = cap if max_out in (None, "inf") else min(int(max_out), cap)
        if max_tokens < 1:
            return self.error("invalid_value", "max_output_tokens must be ≥ 1", ev.event_id, "max_output_tokens")
        sched = {}
        for src in (s.scheduler, opts.scheduler):
            if src is not None:
                sched.update(src.model_dump(exclude_none=True))
        modalities = list(pick("output_modalities") or ["text"])
        where = "response" if opts.tools is not None or opts.tool_choice is not None else "session"
        try:
            tools, self.mcp.last_routes = self.mcp.plan(pick("tools"), pick("tool_choice"), where)
        except functions.ToolError as exc:
            return self.error("invalid_value", exc.message, ev.event_id, exc.param)
        action = StartResponse(
            response_id=rid,
            messages=self.messages(opts.instructions) + extra,
            sampling={
                "temperature": pick("temperature") or 0.0,
                "top_p": pick("top_p") or 1.0,
                "seed": pick("seed"),
                "max_tokens": max_tokens,
            },
            scheduler=sched,
            output_modalities=modalities,
            tools=tools,
        )
        return action, max_out

    def preview_response(self, user_text: str) -> StartResponse | None:
        """The generation that answering a user turn saying ``user_text`` would start (speculation).

        Nothing changes: no event, no item, no response state. None when that response could not
        start now (one in progress, or bad settings)."""
        if self.response is not None or self._pending or self._held is not None:
            return None
        planned = self._plan(
            p.ResponseCreate(type="response.create"), _new_id("spec"), [{"role": "user", "content": user_text}]
        )
        return None if isinstance(planned, Output) else planned[0]

    def _on_response_create(self, ev: p.ResponseCreate) -> Output:
        if self.response is not None:
            return self.error(
                "conversation_already_has_active_response",
                f"response {self.response.id} is still in progress",
                ev.event_id,
            )
        ev = self.mcp_strip(ev)
        held = self.mcp_hold(ev)  # MCP listings it needs come first
        if held is not None:
            return held
        planned = self._plan(ev, _new_id("resp"), [])
        if isinstance(planned, Output):
            return planned
        action, max_out = planned
        rid, modalities = action.response_id, action.output_modalities
        opts = ev.response or p.ResponseOptions()
        store = opts.conversation != "none"
        conv_id = self.id.replace("sess_", "conv_", 1) if store else None  # one conversation per session
        self.response = ResponseState(
            rid, _new_id("item"), modalities, store, metadata=opts.metadata, conversation_id=conv_id
        )
        self.response.known_tools = action.tools.known
        created = p.server_event(
            "response.created",
            response={
                "id": rid,
                "object": "realtime.response",
                "status": "in_progress",
                "status_details": None,
                "output": [],
                "output_modalities": modalities,
                "max_output_tokens": max_out if max_out is not None else "inf",
                "conversation_id": conv_id,
                "metadata": opts.metadata,
                "usage": None,
            },
        )
        calls = self.mcp_begin(ev, action, self.mcp.last_routes)  # approved MCP calls run first
        out = self._out(created, actions=[action] if calls is None else [])
        if calls is not None:
            out.extend(calls)
        if "image" in modalities:
            prompt = next((m["content"] for m in reversed(action.messages) if m["role"] == "user"), "")
            out.extend(self.image_request(rid, prompt))
        return out

    def _on_response_cancel(self, ev: p.ResponseCancel) -> Output:
        r = self.response
        if r is None or (ev.response_id and ev.response_id != r.id):
            return self.error(
                "response_cancel_not_active", "no response in progress to cancel", ev.event_id, "response_id"
            )
        return self.cancel("client_cancelled")

    # ------------------------------------------------------------------ engine results

    def cancel(self, reason: str) -> Output:
        """Priority path: end the active response now (``response.done`` cancelled)."""
        r = self.response
        if r is None:
            return Output()
        out = self._finish(r, "cancelled", {"type": "cancelled", "reason": reason}, None, {})
        out.actions.insert(0, CancelResponse(r.id))
        return out

    def abandon(self, reason: str) -> Output:
        """End the active response ``incomplete`` because the server failed it (the replica running it
        died): its delivered text stays in the conversation, unlike a cancel's."""
        r = self.response
        if r is None:
            return Output()
        # images still denoising there never finish: closed incomplete now (final_events)
        return self._finish(r, "incomplete", {"type": "incomplete", "reason": reason}, None, {}, wait_images=False)

    def on_chunk(self, response_id: str, text: str) -> Output:
        r = self.response
        if r is None or r.id != response_id or not text:
            return Output()  # late chunk of a cancelled/finished response: dropped
        events = [] if r.started else r.start_events(self.conversation.last_id)
        r.text += text
        events.append(
            p.server_event(
                "response.output_text.delta",
                response_id=r.id,
                item_id=r.item_id,
                output_index=0,
                content_index=0,
                delta=text,
            )
        )
        return self._out(*events)

    def on_tool_call(self, response_id: str, body: str) -> Output:
        """A call the scheduler cut out of the text (whole): a function_call output item, streamed."""
        r = self.response
        call = functions.parse(body, r.known_tools) if r is not None and r.id == response_id else None
        if r is None or call is None:
            return Output()  # late, or not a call of an offered tool: dropped, never shown
        mcp = self.mcp_on_call(r.id, call)  # the gateway runs it (gateway.tools)
        if mcp is not None:
            return mcp
        item, events = functions.call_events(r.id, call, 1 + len(r.images) + len(r.calls), self.conversation.last_id)
        r.calls.append(item)
        return self._out(*events)

    def on_done(self, response_id: str, reason: str, metrics: dict[str, Any], usage: dict[str, Any]) -> Output:
        r = self.response
        if r is None or r.id != response_id:
            return Output()  # already ended (cancel path)
        calls = self.mcp_on_done(r.id, reason)  # MCP calls to run: the response goes on after them
        if calls is not None:
            return calls
        if reason == "stop":
            return self._finish(r, "completed", None, metrics, usage)
        if reason == "length":
            return self._finish(r, "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}, metrics, usage)
        if reason == "cancelled":
            return self._finish(r, "cancelled", {"type": "cancelled", "reason": "client_cancelled"}, metrics, usage)
        if reason == "content_filter":  # a chunk filter stopped it (gateway.filters)
            return self._finish(r, "incomplete", {"type": "incomplete", "reason": "content_filter"}, metrics, usage)
        err = {"type": "server_error", "code": metrics.get("error_code", "generation_failed")}
        return self._finish(r, "failed", {"type": "failed", "error": err}, metrics, usage)

    def _finish(
        self,
        r: ResponseState,
        status: str,
        details: dict[str, Any] | None,
        metrics: dict[str, Any] | None,
        usage: dict[str, Any],
        wait_images: bool = True,
    ) -> Output:
        if wait_images and status != "cancelled" and r.images_pending:  # text is done; images still denoising
            r.ending = (status, details, metrics, usage)
            return Output()
        if self.response is not r:
            raise RuntimeError(f"expected active response {r.id}, found {self.response and self.response.id}")
        self.response = None
        self.mcp_end(r)
        item = r.item("completed" if status == "completed" else "incomplete") if r.started else None
        if item is not None and r.store:  # the conversation keeps exactly the delivered text
            self.conversation.append(item)
        for call in r.calls if r.store else []:  # whole calls only (functions.py)
            self.conversation.append(call)
        events = final_events(r, item, status, details, metrics, usage)
        return self._out(*events)
