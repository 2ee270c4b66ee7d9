"""Sans-I/O Realtime session: one typed input in (``handle``), stamped server events and actions out.

No asyncio, Starlette or torch. The I/O layer feeds ``Session.handle`` one ``Input`` at a time: a parsed
client event, or an internal input (``gateway.realtime.inputs``: a chunk the engine decoded, a transcript,
an MCP answer, a barge-in). It returns the server events to send (already stamped with a contiguous
``seq``) plus actions for the I/O layer to run (``gateway.realtime.actions``); nothing the I/O layer does
comes back into the session except as a later input. Besides ``handle`` the I/O layer only reads
(``id``, ``options``, ``response``, ``session_view``, ``preview_response``). Illegal states raise
``RuntimeError`` naming the expected and actual state.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models.sampling import SamplingParams

from ..core.keylimits import BoundLimits
from ..core.request_options import ServerChunking, layered, model_refusal
from ..tools.mcp_session import McpOutput
from ..tools.state import McpPolicy, McpState
from ..tools.wire import McpApprovalResponseItem
from ..voice.speech_actions import SpeechSettings
from . import audio_settings, functions, image_output, planning, speech_out, transcription
from . import fixed_fields as locks
from . import inputs as i
from . import protocol as p
from . import server_events as se
from .actions import Action, AppendAudio, ClearAudio, CommitAudio, Output, Refused, ResolveItem, StartResponse
from .conversation import Conversation
from .items import ItemEvents, has_media
from .response_ending import ResponseEnding
from .response_flow import ResponseFlow
from .responses import ResponseState
from .speech_out import AudioState, SpeechOutput, SpokenItem

CANCEL_NOT_ACTIVE = "Cancellation failed: no active response found"  # OpenAI's message, word for word
BUSY = "the server is at capacity; retry shortly"
# a reply the server asks for itself (a VAD turn, the idle timeout) is one on the session's own settings:
# what a response.create with no options asks for, so it is planned as one (never sent as a client event)
SESSION_REPLY = p.ResponseCreate(type="response.create")


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
    scheduler: ServerChunking = ServerChunking()  # the server's scheduler defaults, under every session's options
    max_items: int = 512  # conversation items kept per session
    speech: SpeechSettings | None = None  # default audio.output; None: no voice loaded (audio is served as text)
    voices: tuple[str, ...] = ()  # installed voices (audio.output.voice)
    max_context: int = 0  # the model's context in tokens; 0: unknown (no truncation)
    context_tokens: int | None = None  # most tokens after the instructions that truncation keeps; None: no cap
    count_tokens: Callable[[str], int] | None = None  # a text's tokens (truncation's estimates)
    mcp: McpPolicy = field(default_factory=McpPolicy)  # what MCP servers it may reach (config tools)
    turn_detection: dict[str, Any] | None = None  # the server's default audio.input.turn_detection
    transcribes: bool = False  # a Whisper model is loaded (session views show input transcription)
    has_room: Callable[[], bool] = lambda: True  # the engine takes another generation now (else server_busy)


class Session(ResponseFlow, SpeechOutput, McpOutput, ItemEvents):
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
        )
        self.conversation = Conversation(defaults.max_items)
        self.mcp = McpState(defaults.mcp)
        self.response: ResponseState | None = None
        self.spoken: dict[str, SpokenItem] = {}  # spoken assistant items: what truncating them needs
        self._pending: set[str] = set()  # items whose content is still being made (see item_pending)
        self._held: p.ResponseCreate | None = None  # a response.create waiting for them
        self.dropped: set[str] = set()  # items truncated out of the model's context (still in the client's view)
        self.token_counts: dict[str, tuple[str, int]] = {}  # item id → (its text, its tokens), for truncation
        # (response id, its ending) → the metrics response.done carries (the shell adds turn_latency)
        self.finish_hook: Callable[[str, ResponseEnding], dict[str, Any] | None] | None = None
        self.limiter: BoundLimits | None = None  # its key's response and token budgets (gateway.core.keylimits)
        self.locked: frozenset[str] = frozenset()  # session fields an ek_ key fixed (gateway.realtime.fixed_fields)

    # ------------------------------------------------------------------ helpers

    def _out(self, *events: dict[str, Any], actions: list[Action] | None = None) -> Output:
        return Output([self._stamp(e) for e in events], actions or [])

    def error(self, code: str, message: str, event_id: str | None = None, param: str | None = None) -> Output:
        return self._out(se.error_event(code, message, event_id, param))

    def has_item(self, item_id: str) -> bool:
        """Whether the conversation holds ``item_id`` (a reopened turn's shell deletes only what exists)."""
        return self.conversation.get(item_id) is not None

    def session_view(self) -> dict[str, Any]:
        view = self.options.model_dump(exclude_none=True)
        view.update(id=self.id, object="realtime.session")
        audio_in = audio_settings.audio_in(self.options, self.defaults.turn_detection)
        audio_settings.describe(view, audio_in, self.defaults.transcribes)  # effective settings, all filled in
        if self.options.type == "transcription":
            return transcription.view(view)
        speech_out.describe_output(view, self.defaults.speech, self.options)
        return view

    def created(self, resume: dict[str, Any] | None = None) -> Output:
        return self._out(se.session_created(self.session_view(), resume))

    # ------------------------------------------------------------------ client events

    def handle(self, inp: i.Input) -> Output:
        """The door: a parsed client event or an internal input (``inputs.py``) → the events answering it,
        and what the I/O layer must do for it (``actions.py``)."""
        match inp:
            case p.SessionUpdate():  # (its audio input settings were checked by the voice layer first)
                return self._apply_update(inp)
            case p.ItemCreate() if has_media(inp.item):
                key = f"media-{id(inp)}"
                self.item_pending(key)  # now, so a response.create right behind it waits for it
                return Output(actions=[ResolveItem(inp, key)])
            case p.ItemCreate():
                return self._on_conversation_item_create(inp)
            case p.ItemDelete():
                return self._on_conversation_item_delete(inp)
            case p.ItemTruncate():
                return self._on_conversation_item_truncate(inp)
            case p.ItemRetrieve():
                return self._on_conversation_item_retrieve(inp)
            case p.AudioAppend():
                return Output(actions=[AppendAudio(inp.audio, inp.event_id)])
            case p.AudioCommit():
                return Output(actions=[CommitAudio(inp.event_id)])
            case p.AudioClear():
                return Output(actions=[ClearAudio()])
            case p.ResponseCreate():
                return self._request(inp)
            case p.ResponseCancel():
                return self._on_response_cancel(inp)
        return self._internal(inp)

    def _internal(self, inp: i.Input) -> Output:
        match inp:
            case i.EngineChunk(rid, text):
                return self.on_chunk(rid, text)
            case i.ToolCallCut(rid, body):
                return self.on_tool_call(rid, body)
            case i.Finished(rid, reason, metrics, usage):
                return self.on_done(rid, reason, metrics, usage)
            case i.StartFailed(rid, code, message):
                out = self.error(code, message) if message is not None else Output()
                return out.extend(self.on_done(rid, "error", {"error_code": code}, {}))
            case i.ImageRequested(rid, prompt):
                return image_output.request(self, rid, prompt)
            case i.ImageProgressed(rid, item_id, event):
                return image_output.progress(self, rid, item_id, event)
            case i.SpeechMade(result):
                return self.on_speech(result)  # type: ignore[no-any-return]
            case i.VoiceStarted(item_id, ms):
                return self.speech_started(item_id, ms)
            case i.VoiceStopped(item_id, ms):
                return self.speech_stopped(item_id, ms)
            case i.AudioCommitted(item_id):
                self.item_pending(item_id)  # its transcript is to come: responses wait for it
                return self.audio_committed(item_id)
            case i.AudioCleared():
                return self.audio_cleared()
            case i.TranscriptDelta(item_id, delta):
                return self.transcript_delta(item_id, delta)
            case i.TranscriptDone(item_id, transcript, seconds):
                return self.transcript_done(item_id, transcript, seconds)
            case i.TranscriptFailed(item_id, code, message):
                return self.transcript_failed(item_id, code, message)
            case i.TurnEnded(item_id, respond):
                go = self.settle(item_id)
                if respond and go is None:
                    go = self.want_response(SESSION_REPLY)
                return Output() if go is None else self._admit(go)
            case i.IdleTimedOut(item_id, now_ms):
                if self.response is not None:  # a reply is under way: the user is listening, not idle
                    return Output()
                return self.timeout_triggered(item_id, now_ms).extend(self._request(SESSION_REPLY))
            case i.HeardUpTo(item_id, played_ms):
                return self.truncate_heard(item_id, played_ms)  # type: ignore[no-any-return]
            case i.PlayOnTrack():
                self.audio_track = True
                return Output()
            case i.ItemResolved(key, event):
                return self._item_resolved(key, event)
            case i.McpListed(label, item_id, tools, error, allowed):
                out = self.mcp_listed(label, item_id, tools, error, allowed)
                go = self.settle(f"mcp-list-{label}")  # a response that waited for the listing may start
                return out if go is None else out.extend(self._admit(go))
            case i.McpResult(rid, item_id, output, error):
                return self.mcp_result(rid, item_id, output, error)
            case i.Cancel(reason):
                return self.cancel(reason)
            case i.Abandon(reason):
                return self.abandon(reason)
            case i.Report(code, message, event_id, param):
                return self.error(code, message, event_id, param)
            case i.Opened(resume):
                return self.created(resume)
            case i.Preset(limiter, session_id, update):
                return self._preset(limiter, session_id, update)
            case i.Restored():
                return self._restored(inp)
        raise AssertionError(f"unhandled input {type(inp).__name__}")

    def _request(self, ev: p.ResponseCreate) -> Output:
        go = self.want_response(ev)
        return Output() if go is None else self._admit(go)

    def _admit(self, ev: p.ResponseCreate) -> Output:
        """A ``response.create`` no pending item holds back: refused at once when a response is in progress,
        ``server_busy`` when the engine has no room for it, else created."""
        if self.response is None and not self.defaults.has_room():
            return self._out(se.error_event("server_busy", BUSY, ev.event_id), actions=[Refused("server_busy")])
        return self._create_response(ev)

    def _item_resolved(self, key: str, ev: p.ItemCreate | None) -> Output:
        """Item ``key``'s media is text now (``ev``), or it was refused (None): a response held for it may start."""
        out = self._on_conversation_item_create(ev) if ev is not None else Output()
        go = self.settle(key)
        return out if go is None else out.extend(self._admit(go))

    def _restored(self, r: i.Restored) -> Output:
        self.id, self.options, self.locked, self.response = r.session_id, r.options, r.locked, r.response
        self.conversation.items = list(r.items)
        return Output()

    def _preset(self, limiter: BoundLimits | None, session_id: str | None, ev: p.SessionUpdate | None) -> Output:
        """Before ``session.created``: its key's budgets, the id its grant named, and the config the grant
        fixed (those fields locked), or the error refusing that config (the session then never opens)."""
        self.limiter = limiter
        if session_id:
            self.id = session_id
        if ev is None:
            return Output()
        merged = self.merged(ev)
        if isinstance(merged, Output):
            return merged
        self.options = merged
        self.locked = frozenset({*ev.session.model_fields_set, "model"})
        return Output()

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

    def _apply_update(self, ev: p.SessionUpdate) -> Output:
        """A ``session.update`` whose audio settings the voice layer accepted."""
        ev = locks.unlocked(ev, self.locked)  # what an ek_ key fixed stays: those fields are ignored
        merged = self.merged(ev)
        if isinstance(merged, Output):
            return merged
        self.options = merged
        out = self._out(se.session_updated(self.session_view()))
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
        merged.update(patch)
        if ev.session.scheduler is not None and self.options.scheduler is not None:  # (null: back to the server's)
            merged["scheduler"] = layered(self.options.scheduler, ev.session.scheduler).model_dump(exclude_none=True)
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
        planned = planning.plan(self, SESSION_REPLY, _new_id("spec"), [{"role": "user", "content": user_text}])
        return None if isinstance(planned, Output) else planned[0]

    def _create_response(self, ev: p.ResponseCreate) -> Output:
        """A ``response.create`` the engine has room for (``_admit``), or refused here."""
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
        created = se.response_created(
            {
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
