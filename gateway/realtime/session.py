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

from models.sampling import SamplingParams

from ..keylimits import BoundLimits
from ..options import SchedulerOptions, model_refusal
from ..tools.session import McpOutput
from ..tools.state import McpPolicy, McpState
from ..tools.wire import McpApprovalResponseItem
from ..voice.speech_actions import SpeechSettings
from . import functions, image_output, locks, planning, speech_out, transcription
from . import protocol as p
from .actions import (
    Action,
    AppendAudio,
    CancelResponse,
    CheckCapacity,
    CheckUpdate,
    ClearAudio,
    CommitAudio,
    Output,
    ResolveItem,
    StartResponse,
)
from .conversation import Conversation
from .items import ItemEvents, has_media
from .responses import ResponseState, final_events
from .speech_out import AudioState, SpeechOutput, SpokenItem

CANCEL_NOT_ACTIVE = "Cancellation failed: no active response found"  # OpenAI's message, word for word


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass(frozen=True)
class SessionDefaults:
    model: str  # served model id
    aliases: tuple[str, ...] = ()  # other ids accepted as session.model (config model.aliases)
    instructions: str | None = None  # system prompt when the client sets none
    temperature: float = 0.0  # 0 → greedy (shown in the session; ``sampling`` is what responses start from)
    top_p: float = 1.0
    sampling: SamplingParams = field(default_factory=SamplingParams)  # the server's sampling defaults
    max_output_tokens: int = 512  # per response, unless the client asks for fewer
    output_modalities: tuple[str, ...] = ("text",)
    scheduler: dict[str, Any] = field(default_factory=dict)  # SchedulerOptions defaults
    max_items: int = 512  # conversation items kept per session
    speech: SpeechSettings | None = None  # default audio.output; None: no voice loaded (audio is served as text)
    voices: tuple[str, ...] = ()  # installed voices (audio.output.voice)
    max_context: int = 0  # the model's context in tokens; 0: unknown (no truncation)
    context_tokens: int | None = None  # most tokens after the instructions that truncation keeps; None: no cap
    count_tokens: Callable[[str], int] | None = None  # a text's tokens (truncation's estimates)
    mcp: McpPolicy = field(default_factory=McpPolicy)  # what MCP servers it may reach (config tools)


class Session(SpeechOutput, McpOutput, ItemEvents):
    def __init__(
        self, defaults: SessionDefaults, stamp: Callable[[dict[str, Any]], dict[str, Any]], transcribe: bool = False
    ):
        """``stamp`` gives each outgoing event its ``seq`` (and records it for replay); ``transcribe``: a
        transcription session (``?intent=transcription``; gateway.realtime.transcription)."""
        self.id = _new_id("sess")
        self.defaults = defaults
        self._stamp = stamp
        self.options = p.SessionOptions(
            type="transcription" if transcribe else "realtime",
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
        self.spoken: dict[str, SpokenItem] = {}  # spoken assistant items: what truncating them needs
        self._pending: set[str] = set()  # items whose content is still being made (see item_pending)
        self._held: p.ResponseCreate | None = None  # a response.create waiting for them
        self.dropped: set[str] = set()  # items truncated out of the model's context (still in the client's view)
        self.token_counts: dict[str, tuple[str, int]] = {}  # item id → (its text, its tokens), for truncation
        self.view_hook: Callable[[dict[str, Any]], None] | None = None  # fills in effective audio settings
        # (response id, status, metrics) → the metrics response.done carries (the shell adds turn_latency)
        self.finish_hook: Callable[[str, str, dict[str, Any] | None], dict[str, Any] | None] | None = None
        self.limiter: BoundLimits | None = None  # its key's response and token budgets (gateway.keylimits)
        self.locked: frozenset[str] = frozenset()  # session fields an ek_ key fixed (gateway.realtime.locks)

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
        if self.options.type == "transcription":
            return transcription.view(view)
        speech_out.describe_output(view, self.defaults.speech, self.options)
        return view

    def created(self, extra: dict[str, Any] | None = None) -> Output:
        return self._out(p.server_event("session.created", session=self.session_view(), **(extra or {})))

    # ------------------------------------------------------------------ client events

    def handle(self, ev: p.ClientEvent) -> Output:
        """A parsed client event: the events answering it, and what the I/O layer must do for it (actions.py)."""
        match ev:
            case p.SessionUpdate():
                return Output(actions=[CheckUpdate(ev)])  # its audio settings are the voice layer's to check
            case p.ItemCreate() if has_media(ev.item):
                key = f"media-{id(ev)}"
                self.item_pending(key)  # now, so a response.create right behind it waits for it
                return Output(actions=[ResolveItem(ev, key)])
            case p.ItemCreate():
                return self._on_conversation_item_create(ev)
            case p.ItemDelete():
                return self._on_conversation_item_delete(ev)
            case p.ItemTruncate():
                return self._on_conversation_item_truncate(ev)
            case p.ItemRetrieve():
                return self._on_conversation_item_retrieve(ev)
            case p.AudioAppend():
                return Output(actions=[AppendAudio(ev.audio, ev.event_id)])
            case p.AudioCommit():
                return Output(actions=[CommitAudio(ev.event_id)])
            case p.AudioClear():
                return Output(actions=[ClearAudio()])
            case p.ResponseCreate():
                go = self.want_response(ev)
                return Output() if go is None else self.admit(go)
            case p.ResponseCancel():
                return self._on_response_cancel(ev)
        raise AssertionError(f"unhandled client event {ev.type}")

    def admit(self, ev: p.ResponseCreate) -> Output:
        """A ``response.create`` no pending item holds back: the engine's room is checked first, unless a
        response is in progress (then it is refused at once)."""
        return Output(actions=[CheckCapacity(ev)]) if self.response is None else self.create_response(ev)

    def item_resolved(self, key: str, ev: p.ItemCreate | None) -> Output:
        """Item ``key``'s media is text now (``ev``), or it was refused (None): a response held for it may start."""
        out = self._on_conversation_item_create(ev) if ev is not None else Output()
        go = self.settle(key)
        return out if go is None else out.extend(self.admit(go))

    # ------------------------------------------------------------------ items still being resolved

    def item_pending(self, key: str) -> None:
        """An item (a transcript, an image description) is being made; responses wait for it."""
        self._pending.add(key)

    def want_response(self, ev: p.ResponseCreate) -> p.ResponseCreate | None:
        """``ev`` if it may start now; else it is held until every pending item has settled.

        One response per batch of items: while one is held, later ones are dropped (a VAD turn's
        automatic response and the client's own ``response.create`` for the same turn)."""
        if not self._pending or self.options.type == "transcription":  # (refused at once there)
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

    def apply_update(self, ev: p.SessionUpdate) -> Output:
        """A ``session.update`` whose audio settings the voice layer accepted (``CheckUpdate``)."""
        ev = locks.unlocked(ev, self.locked)  # what an ek_ key fixed stays: those fields are ignored
        merged = self.merged(ev)
        if isinstance(merged, Output):
            return merged
        self.options = merged
        out = self._out(p.server_event("session.updated", session=self.session_view()))
        return out.extend(self.mcp_list(merged.tools)) if "tools" in ev.session.model_fields_set else out

    def merged(self, ev: p.SessionUpdate) -> p.SessionOptions | Output:
        """The session's options with ``ev`` applied, or the error refusing it (the options unchanged)."""
        if self.response is not None and ev.session.model not in (None, self.options.model):
            return self.error("invalid_value", "model cannot change during a response", ev.event_id)
        if self.response is not None and ev.session.type == "transcription":
            msg = "a session cannot become a transcription session while a response is in progress"
            return self.error("invalid_value", msg, ev.event_id, "session.type")
        served = (self.defaults.model, *self.defaults.aliases)
        if ev.session.model is not None and (refusal := model_refusal(served, ev.session.model)) is not None:
            return self.error("model_not_found", refusal, ev.event_id, "session.model")
        ev = self.mcp_strip(ev)
        patch = ev.session.model_dump(exclude_unset=True)
        merged = self.options.model_dump(exclude_unset=False)
        for key, value in patch.items():
            if key == "scheduler" and value is not None and merged.get("scheduler"):
                merged["scheduler"] = {**merged["scheduler"], **{k: v for k, v in value.items() if v is not None}}
            else:
                merged[key] = value
        options = p.SessionOptions.model_validate(merged)
        out = options.audio.output if options.audio else None
        refused = speech_out.check_output(out, self.defaults.voices, "session")
        if refused is not None:
            return self.error("invalid_value", refused[0], ev.event_id, refused[1])
        try:
            # the tools' schemas only: tool_choice against the tools is checked when a response uses them, as
            # LiveKit (written against OpenAI) sends tool_choice in its first session.update, its tools in a later one
            self.mcp.plan(options.tools, None, "session")
        except functions.ToolError as exc:  # the session keeps its options
            return self.error("invalid_value", exc.message, ev.event_id, exc.param)
        return options

    def _on_conversation_item_create(self, ev: p.ItemCreate) -> Output:
        if isinstance(ev.item, McpApprovalResponseItem):  # answers a pending MCP call (gateway.tools)
            return self.mcp_approval(ev, self.add_item)
        return super()._on_conversation_item_create(ev)  # type: ignore[no-any-return]

    def _on_conversation_item_truncate(self, ev: p.ItemTruncate) -> Output:
        r = self.response
        if r is not None and r.item_id == ev.item_id and r.audio is not None:  # still speaking: it stops here
            return self.cancel("client_cancelled").extend(self.truncate(ev))
        return self.truncate(ev)  # type: ignore[no-any-return]

    def messages(self, extra_instructions: str | None = None) -> list[dict[str, str]]:
        """The conversation as chat messages, after the session's (or these) instructions."""
        system = extra_instructions if extra_instructions is not None else self.options.instructions
        return self.conversation.messages(system, self.dropped)

    def _plan(self, ev: p.ResponseCreate, rid: str, extra: list[dict[str, str]]) -> tuple[StartResponse, Any] | Output:
        return planning.plan(self, ev, rid, extra)  # (McpOutput's way to it)

    def preview_response(self, user_text: str) -> StartResponse | None:
        """The generation that answering a user turn saying ``user_text`` would start (speculation).

        Nothing changes: no event, no item, no response state. None when that response could not
        start now (one in progress, or bad settings)."""
        if self.response is not None or self._pending or self._held is not None or self.options.type == "transcription":
            return None
        planned = planning.plan(
            self, p.ResponseCreate(type="response.create"), _new_id("spec"), [{"role": "user", "content": user_text}]
        )
        return None if isinstance(planned, Output) else planned[0]

    def create_response(self, ev: p.ResponseCreate) -> Output:
        """A ``response.create`` the engine has room for (``CheckCapacity``), or refused here."""
        if self.options.type == "transcription":
            return self.error("unsupported_event", transcription.NO_RESPONSES, ev.event_id, "type")
        if self.response is not None:
            return self.error(
                "conversation_already_has_active_response",
                f"response {self.response.id} is still in progress",
                ev.event_id,
            )
        fixed = locks.overridden(ev, self.locked)
        if fixed is not None:
            return self.error("session_field_locked", f"{fixed} is fixed by this session's key", ev.event_id, fixed)
        ev = self.mcp_strip(ev)
        audio_opts = ev.response.audio if ev.response is not None else None
        refused = speech_out.check_output(audio_opts.output if audio_opts else None, self.defaults.voices, "response")
        if refused is not None:
            return self.error("invalid_value", refused[0], ev.event_id, refused[1])
        held = self.mcp_hold(ev)  # MCP listings it needs come first
        if held is not None:
            return held
        planned = planning.plan(self, ev, _new_id("resp"), [])
        if isinstance(planned, Output):
            return planned
        action, max_out = planned
        spent = self.limiter.admit() if self.limiter is not None else None
        if spent is not None:
            return self.error("rate_limit_exceeded", spent.message(), ev.event_id)
        rid, modalities = action.response_id, action.output_modalities
        opts = ev.response or p.ResponseOptions()
        store = opts.conversation != "none"
        conv_id = self.id.replace("sess_", "conv_", 1) if store else None  # one conversation per session
        self.response = ResponseState(
            rid, _new_id("item"), modalities, store, metadata=opts.metadata, conversation_id=conv_id
        )
        self.response.known_tools = action.tools.known
        if "audio" in modalities and self.defaults.speech is not None:
            self.response.audio = AudioState(speech_out.settings_for(self.defaults.speech, self.options, opts))
        self.response.parallel = action.tools.parallel
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
            out.extend(image_output.request(self, rid, prompt))
        return out

    def _on_response_cancel(self, ev: p.ResponseCancel) -> Output:
        r = self.response
        if r is None or (ev.response_id and ev.response_id != r.id):
            # OpenAI's words: clients match them to ignore the race of a cancel with the server's own end
            # of a response (LiveKit Agents drops an error starting "Cancellation failed")
            return self.error("response_cancel_not_active", CANCEL_NOT_ACTIVE, ev.event_id, "response_id")
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
        if not r.started and r.known_tools:  # tools offered: a call may follow
            if not text.strip():  # whitespace alone opens no message yet (the newline between calls is no reply)
                r.held += text
                return Output()
            text, r.held = r.held + text, ""
        return self._text_events(r, text)

    def _text_events(self, r: ResponseState, text: str) -> Output:
        events = [] if r.started else self._open_message(r)
        r.text += text
        if r.audio is not None:
            return self.speak_chunk(r, text, events)  # type: ignore[no-any-return]
        events.append(
            p.server_event(
                "response.output_text.delta",
                response_id=r.id,
                item_id=r.item_id,
                output_index=r.text_index,
                content_index=0,
                delta=text,
            )
        )
        return self._out(*events)

    def _open_message(self, r: ResponseState) -> list[dict[str, Any]]:
        """The assistant message's opening events; it is in the conversation from now on, as in GA."""
        events = r.start_events(self.conversation.last_id)
        if r.store:
            self.conversation.append(r.item("in_progress"))
        return events

    def on_tool_call(self, response_id: str, body: str) -> Output:
        """A call the scheduler cut out of the text (whole): a function_call output item, streamed.

        It joins the conversation when it is announced (``status: "completed"``), so the client may send its
        ``function_call_output`` at once, before ``response.done``, as the Agents SDKs do."""
        r = self.response
        call = functions.parse(body, r.known_tools) if r is not None and r.id == response_id else None
        if r is None or call is None:
            return Output()  # late, or not a call of an offered tool: dropped, never shown
        if r.calls and not r.parallel:
            return Output()  # parallel_tool_calls false: the first call only
        mcp = self.mcp_on_call(r.id, call)  # the gateway runs it (gateway.tools)
        if mcp is not None:
            return mcp
        item, events = functions.call_events(r.id, call, r.take_index, self.conversation.last_id)
        r.calls.append(item)
        if r.store:
            self.conversation.append(item)
        else:  # out-of-band: the call is the response's only, not the conversation's
            events = [e for e in events if not e["type"].startswith("conversation.")]
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
        if wait_images and status != "cancelled" and r.waiting:  # text is done; images or speech still being made
            r.ending = (status, details, metrics, usage)
            return Output()
        if self.response is not r:
            raise RuntimeError(f"expected active response {r.id}, found {self.response and self.response.id}")
        self.response = None
        self.mcp_end(r)
        # a reply of whitespace alone is still a reply, unless it only separated calls (or was never delivered)
        # (spoken, whitespace says nothing)
        held = r.held and not r.calls and status != "cancelled" and r.audio is None
        opened = self._text_events(r, r.held) if held else Output()
        item = r.item("completed" if status == "completed" else "incomplete") if r.started else None
        kept = self.conversation.get(r.item_id) if r.store else None
        if item is not None and kept is not None:  # exactly the delivered text (unless the client deleted it)
            kept.update(item)
        self.spoken_closed(r, item)
        if self.finish_hook is not None:
            metrics = self.finish_hook(r.id, status, metrics)
        events = final_events(r, item, status, details, metrics, usage)
        if self.limiter is not None:  # what the key has left, after this response's tokens
            left = self.limiter.charge(int(usage.get("total_tokens", 0)))
            events.append(p.server_event("rate_limits.updated", rate_limits=[x.wire() for x in left]))
        return opened.extend(self._out(*events))
