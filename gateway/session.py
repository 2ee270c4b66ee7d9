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

from . import protocol as p


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass(frozen=True)
class SessionDefaults:
    model: str  # served model id
    instructions: str | None = None  # system prompt when the client sets none
    temperature: float = 0.0  # 0 → greedy
    top_p: float = 1.0
    max_output_tokens: int = 512  # per response, unless the client asks for fewer
    output_modalities: tuple[str, ...] = ("text",)
    scheduler: dict[str, Any] = field(default_factory=dict)  # SchedulerOptions defaults
    max_items: int = 512  # conversation items kept per session


@dataclass
class StartResponse:
    """Action: generate ``response_id`` from ``messages`` with these options."""

    response_id: str
    messages: list[dict[str, str]]
    sampling: dict[str, Any]  # temperature, top_p, seed, max_tokens
    scheduler: dict[str, Any]  # SchedulerOptions fields that are set
    output_modalities: list[str]


@dataclass
class CancelResponse:
    response_id: str


@dataclass
class StartImage:
    """Action: generate an image for ``response_id`` as output item ``item_id``."""

    response_id: str
    item_id: str
    prompt: str


@dataclass
class Output:
    events: list[dict[str, Any]] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)

    def extend(self, other: Output) -> Output:
        self.events.extend(other.events)
        self.actions.extend(other.actions)
        return self


@dataclass
class _Response:
    id: str
    item_id: str
    modalities: list[str]
    store: bool  # conversation "auto" (True) or "none"
    text: str = ""  # delivered text only
    started: bool = False  # item/part events sent
    images: dict[str, dict[str, Any]] = field(default_factory=dict)  # image_generation_call items by id
    ending: tuple[Any, ...] | None = None  # text finished; response.done waits for images

    @property
    def images_pending(self) -> bool:
        return any(i["status"] == "in_progress" for i in self.images.values())


class Session:
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
            scheduler=p.SchedulerOptions(**defaults.scheduler) if defaults.scheduler else None,
        )
        self.items: list[dict[str, Any]] = []
        self.response: _Response | None = None

    # ------------------------------------------------------------------ helpers

    def _out(self, *events: dict[str, Any], actions: list[Any] | None = None) -> Output:
        return Output([self._stamp(e) for e in events], actions or [])

    def _error(self, code: str, message: str, event_id: str | None = None, param: str | None = None) -> Output:
        return self._out(p.error_event(code, message, event_id, param))

    def session_view(self) -> dict[str, Any]:
        view = self.options.model_dump(exclude_none=True)
        view.update(id=self.id, object="realtime.session")
        return view

    def created(self, extra: dict[str, Any] | None = None) -> Output:
        return self._out(p.server_event("session.created", session=self.session_view(), **(extra or {})))

    # ------------------------------------------------------------------ client events

    def handle(self, ev: Any) -> Output:
        name = "_on_" + ev.type.replace(".", "_")
        method = getattr(self, name, None)
        if method is None:  # parsed but handled by another layer (audio) or not supported
            return self._error("unsupported_event", f"{ev.type} is not supported here", ev.event_id, "type")
        out: Output = method(ev)
        return out

    def _on_session_update(self, ev: p.SessionUpdate) -> Output:
        if self.response is not None and ev.session.model not in (None, self.options.model):
            return self._error("invalid_value", "model cannot change during a response", ev.event_id)
        if ev.session.model not in (None, self.defaults.model):
            return self._error(
                "model_not_found", f"model {ev.session.model!r} is not served here", ev.event_id, "session.model"
            )
        patch = ev.session.model_dump(exclude_unset=True)
        merged = self.options.model_dump(exclude_unset=False)
        for key, value in patch.items():
            if key == "scheduler" and value is not None and merged.get("scheduler"):
                merged["scheduler"] = {**merged["scheduler"], **{k: v for k, v in value.items() if v is not None}}
            else:
                merged[key] = value
        self.options = p.SessionOptions.model_validate(merged)
        return self._out(p.server_event("session.updated", session=self.session_view()))

    def _find(self, item_id: str) -> int:
        for i, item in enumerate(self.items):
            if item["id"] == item_id:
                return i
        return -1

    def add_item(
        self, item: dict[str, Any], previous_item_id: str | None = None, event_id: str | None = None
    ) -> Output:
        """Insert a finished conversation item (also used for audio transcripts)."""
        if self._find(item["id"]) >= 0:
            return self._error("item_already_exists", f"item {item['id']} already exists", event_id, "item.id")
        if previous_item_id in (None, ""):
            pos = len(self.items)
        elif previous_item_id == "root":
            pos = 0
        else:
            pos = self._find(previous_item_id) + 1
            if pos == 0:
                return self._error(
                    "item_not_found", f"previous_item_id {previous_item_id} not found", event_id, "previous_item_id"
                )
        prev = self.items[pos - 1]["id"] if pos > 0 else None
        self.items.insert(pos, item)
        if len(self.items) > self.defaults.max_items:  # oldest non-system items go first
            for i, old in enumerate(self.items):
                if old["role"] != "system" and old is not item:
                    del self.items[i]
                    break
        return self._out(
            p.server_event("conversation.item.added", previous_item_id=prev, item=item),
            p.server_event("conversation.item.done", previous_item_id=prev, item=item),
        )

    def _on_conversation_item_create(self, ev: p.ItemCreate) -> Output:
        parts: list[dict[str, Any]] = []
        for part in ev.item.content:
            if isinstance(part, p.InputText):
                kind = "output_text" if ev.item.role == "assistant" else "input_text"
                parts.append({"type": kind, "text": part.text})
            else:  # images and audio are turned into text by the connection's processors
                return self._error(
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
        prev = self.items[-1]["id"] if self.items else None
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "in_progress",
            "content": [{"type": "input_audio", "transcript": None}],
        }
        self.items.append(item)
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
        i = self._find(item_id)
        if i < 0:  # deleted meanwhile
            return Output()
        item = self.items[i]
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
        i = self._find(item_id)
        if i >= 0:
            self.items[i]["status"] = "incomplete"
            self.items[i]["content"][0]["transcript"] = ""
        return self._out(
            p.server_event(
                "conversation.item.input_audio_transcription.failed",
                item_id=item_id,
                content_index=0,
                error={"type": "transcription_error", "code": code, "message": message},
            )
        )

    def _on_conversation_item_delete(self, ev: p.ItemDelete) -> Output:
        i = self._find(ev.item_id)
        if i < 0:
            return self._error("item_not_found", f"item {ev.item_id} not found", ev.event_id, "item_id")
        del self.items[i]
        return self._out(p.server_event("conversation.item.deleted", item_id=ev.item_id))

    def _on_conversation_item_truncate(self, ev: p.ItemTruncate) -> Output:
        if self._find(ev.item_id) < 0:
            return self._error("item_not_found", f"item {ev.item_id} not found", ev.event_id, "item_id")
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
        """The conversation as chat messages (text of each item joined)."""
        msgs: list[dict[str, str]] = []
        system = extra_instructions if extra_instructions is not None else self.options.instructions
        if system:
            msgs.append({"role": "system", "content": system})
        for item in self.items:
            text = "".join(c.get("text") or c.get("transcript") or "" for c in item["content"])
            msgs.append({"role": item["role"], "content": text})
        return msgs

    def _on_response_create(self, ev: p.ResponseCreate) -> Output:
        if self.response is not None:
            return self._error(
                "conversation_already_has_active_response",
                f"response {self.response.id} is still in progress",
                ev.event_id,
            )
        opts = ev.response or p.ResponseOptions()
        s = self.options

        def pick(name: str) -> Any:
            v = getattr(opts, name)
            return v if v is not None else getattr(s, name)

        max_out = pick("max_output_tokens")
        cap = self.defaults.max_output_tokens
        max_tokens = cap if max_out in (None, "inf") else min(int(max_out), cap)
        if max_tokens < 1:
            return self._error("invalid_value", "max_output_tokens must be ≥ 1", ev.event_id, "max_output_tokens")
        sched = {}
        for src in (s.scheduler, opts.scheduler):
            if src is not None:
                sched.update(src.model_dump(exclude_none=True))
        modalities = list(pick("output_modalities") or ["text"])
        rid, item_id = _new_id("resp"), _new_id("item")
        self.response = _Response(rid, item_id, modalities, store=opts.conversation != "none")
        action = StartResponse(
            response_id=rid,
            messages=self.messages(opts.instructions),
            sampling={
                "temperature": pick("temperature") or 0.0,
                "top_p": pick("top_p") or 1.0,
                "seed": pick("seed"),
                "max_tokens": max_tokens,
            },
            scheduler=sched,
            output_modalities=modalities,
        )
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
                "usage": None,
            },
        )
        out = self._out(created, actions=[action])
        if "image" in modalities:
            prompt = next((m["content"] for m in reversed(action.messages) if m["role"] == "user"), "")
            out.extend(self.image_request(rid, prompt))
        return out

    def _on_response_cancel(self, ev: p.ResponseCancel) -> Output:
        r = self.response
        if r is None or (ev.response_id and ev.response_id != r.id):
            return self._error(
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

    def _item(self, r: _Response, status: str) -> dict[str, Any]:
        return {
            "id": r.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": [{"type": "output_text", "text": r.text}] if r.started or status == "in_progress" else [],
        }

    def _start_events(self, r: _Response) -> list[dict[str, Any]]:
        r.started = True
        item = self._item(r, "in_progress")
        item["content"] = []
        prev = self.items[-1]["id"] if self.items else None
        return [
            p.server_event("response.output_item.added", response_id=r.id, output_index=0, item=item),
            p.server_event("conversation.item.added", previous_item_id=prev, item=item),
            p.server_event(
                "response.content_part.added",
                response_id=r.id,
                item_id=r.item_id,
                output_index=0,
                content_index=0,
                part={"type": "text", "text": ""},
            ),
        ]

    def on_chunk(self, response_id: str, text: str) -> Output:
        r = self.response
        if r is None or r.id != response_id or not text:
            return Output()  # late chunk of a cancelled/finished response: dropped
        events = [] if r.started else self._start_events(r)
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

    # ------------------------------------------------------------------ generated images

    def image_request(self, response_id: str, prompt: str) -> Output:
        """Start an image output item (modality "image", or a request the scheduler intercepted)."""
        r = self.response
        if r is None or r.id != response_id:
            return Output()
        item_id = _new_id("ig")
        index = 1 + len(r.images)
        item = {"id": item_id, "type": "image_generation_call", "status": "in_progress", "output_index": index}
        r.images[item_id] = item
        view = {k: v for k, v in item.items() if k != "output_index"}
        return self._out(
            p.server_event("response.output_item.added", response_id=r.id, output_index=index, item=view),
            p.server_event("response.image_generation_call.in_progress", item_id=item_id, output_index=index),
            actions=[StartImage(r.id, item_id, prompt)],
        )

    def on_image(self, response_id: str, item_id: str, ev: dict[str, Any]) -> Output:
        """A progress event from the image generator (models.image_gen's dicts)."""
        r = self.response
        if r is None or r.id != response_id or item_id not in r.images:
            return Output()  # late event of a cancelled/finished response
        item = r.images[item_id]
        idx = item["output_index"]
        kind = ev.get("kind")
        if kind == "generating":
            return self._out(
                p.server_event("response.image_generation_call.generating", item_id=item_id, output_index=idx)
            )
        if kind == "partial_image":
            return self._out(
                p.server_event(
                    "response.image_generation_call.partial_image",
                    item_id=item_id,
                    output_index=idx,
                    partial_image_index=ev.get("index", 0),
                    partial_image_b64=ev["png_b64"],
                )
            )
        if kind not in ("completed", "cancelled", "failed"):
            return Output()
        item["status"] = "completed" if kind == "completed" else "failed"
        done_item = {"id": item_id, "type": "image_generation_call", "status": item["status"]}
        if kind == "completed":
            done_item["result"] = ev["png_b64"]
            item["result"] = ev["png_b64"]
        events = []
        if kind == "completed":
            events.append(
                p.server_event("response.image_generation_call.completed", item_id=item_id, output_index=idx)
            )
        events.append(p.server_event("response.output_item.done", response_id=r.id, output_index=idx, item=done_item))
        out = self._out(*events)
        if r.ending is not None and not r.images_pending:
            out.extend(self._finish(r, *r.ending))
        return out

    def on_done(self, response_id: str, reason: str, metrics: dict[str, Any], usage: dict[str, Any]) -> Output:
        r = self.response
        if r is None or r.id != response_id:
            return Output()  # already ended (cancel path)
        if reason == "stop":
            return self._finish(r, "completed", None, metrics, usage)
        if reason == "length":
            return self._finish(r, "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}, metrics, usage)
        if reason == "cancelled":
            return self._finish(r, "cancelled", {"type": "cancelled", "reason": "client_cancelled"}, metrics, usage)
        err = {"type": "server_error", "code": metrics.get("error_code", "generation_failed")}
        return self._finish(r, "failed", {"type": "failed", "error": err}, metrics, usage)

    def _finish(
        self,
        r: _Response,
        status: str,
        details: dict[str, Any] | None,
        metrics: dict[str, Any] | None,
        usage: dict[str, Any],
    ) -> Output:
        if status != "cancelled" and r.images_pending:  # text is done; images still denoising
            r.ending = (status, details, metrics, usage)
            return Output()
        if self.response is not r:
            raise RuntimeError(f"expected active response {r.id}, found {self.response and self.response.id}")
        self.response = None
        events: list[dict[str, Any]] = []
        output: list[dict[str, Any]] = []
        if r.started:
            item = self._item(r, "completed" if status == "completed" else "incomplete")
            common = {"response_id": r.id, "item_id": r.item_id, "output_index": 0, "content_index": 0}
            events += [
                p.server_event("response.output_text.done", **common, text=r.text),
                p.server_event("response.content_part.done", **common, part={"type": "text", "text": r.text}),
                p.server_event("response.output_item.done", response_id=r.id, output_index=0, item=item),
                p.server_event("conversation.item.done", item=item),
            ]
            output.append(item)
            if r.store:  # the conversation keeps exactly the delivered text
                self.items.append(item)
        for img in r.images.values():
            if img["status"] == "in_progress":  # cancelled with the response
                img["status"] = "incomplete"
                view = {"id": img["id"], "type": "image_generation_call", "status": "incomplete"}
                events.append(
                    p.server_event(
                        "response.output_item.done", response_id=r.id, output_index=img["output_index"], item=view
                    )
                )
            output.append({k: v for k, v in img.items() if k != "output_index"})
        events.append(
            p.server_event(
                "response.done",
                response={
                    "id": r.id,
                    "object": "realtime.response",
                    "status": status,
                    "status_details": details,
                    "output": output,
                    "output_modalities": r.modalities,
                    "usage": usage or None,
                    "metrics": metrics or None,
                },
            )
        )
        return self._out(*events)
