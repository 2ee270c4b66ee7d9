"""Conversation items of a session: client item events and the user audio items' lifecycle. Pure.

A mixin of ``Session``: it reads and changes the session's conversation and stamps events through
the session. Every item event has the GA shape (``conversation.item.added`` when an item enters the
conversation, ``.done`` once it is complete, ``.retrieved`` / ``.deleted`` / ``.truncated`` on request).
"""

from __future__ import annotations

import secrets
from typing import Any

from . import functions
from . import protocol as p
from . import server_events as se
from .actions import Output
from .conversation import Conversation, Item, ItemError


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def _message(item: p.MessageItem, where: str) -> Item:
    """A client's message item as the conversation keeps it (text parts only: the connection's processors
    turn images and audio into text before the session sees them). Raises ``ItemError``."""
    parts: list[dict[str, Any]] = []
    for part in item.content:
        if not isinstance(part, p.InputText):
            raise ItemError(
                "unsupported_content", f"content type {part.type} is not enabled on this server", f"{where}.content"
            )
        kind = "output_text" if item.role == "assistant" else "input_text"
        parts.append({"type": kind, "text": part.text})
    return {
        "id": item.id or _new_id("item"),
        "object": "realtime.item",
        "type": "message",
        "role": item.role,
        "status": "completed",
        "content": parts,
    }


def has_media(item: object) -> bool:
    """A message with parts besides text (images, audio, files): they become text before it is added."""
    return isinstance(item, p.MessageItem) and any(not isinstance(c, p.InputText) for c in item.content)


class ItemEvents:
    conversation: Conversation

    def _out(self, *events: dict[str, Any], actions: list[Any] | None = None) -> Output:
        raise NotImplementedError  # Session's

    def error(self, code: str, message: str, event_id: str | None = None, param: str | None = None) -> Output:
        raise NotImplementedError  # Session's

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
            se.item_added(prev, item),
            se.item_done(item, prev),
        )

    def _on_conversation_item_create(self, ev: p.ItemCreate) -> Output:
        if isinstance(ev.item, p.FunctionCallOutputItem):
            # a call is in the conversation from the moment it is announced, so its output is accepted at once
            if ev.item.call_id not in functions.call_ids(self.items):
                return self.error("invalid_value", f"no function call {ev.item.call_id!r}", ev.event_id, "item.call_id")
            return self.add_item(functions.output_item(ev.item), ev.previous_item_id, ev.event_id)
        if isinstance(ev.item, p.FunctionCallItem):
            call = functions.call_item(ev.item.call_id, ev.item.name, ev.item.arguments, "completed", ev.item.id)
            return self.add_item(call, ev.previous_item_id, ev.event_id)
        if not isinstance(ev.item, p.MessageItem):  # an MCP approval answer: Session routes it (gateway.tools)
            return self.error("invalid_value", f"unexpected item type {ev.item.type!r}", ev.event_id, "item.type")
        try:
            item = _message(ev.item, "item")
        except ItemError as exc:
            return self.error(exc.code, exc.message, ev.event_id, exc.param)
        return self.add_item(item, ev.previous_item_id, ev.event_id)

    def context_of(self, items: list[p.InputItem], system: str | None, max_items: int) -> list[dict[str, Any]]:
        """The chat messages of a response's own ``input`` (out-of-band): inline items, and references to
        conversation items. Nothing is added to the conversation. Raises ``ItemError``."""
        context = Conversation(max_items + 1)
        for i, entry in enumerate(items):
            where = f"response.input[{i}]"
            if isinstance(entry, p.ItemReference):
                found = self.conversation.get(entry.id)
                if found is None:
                    raise ItemError("item_not_found", f"item {entry.id} not found", f"{where}.id")
                context.append(dict(found))
            elif isinstance(entry, p.FunctionCallOutputItem):
                context.append(functions.output_item(entry))
            elif isinstance(entry, p.FunctionCallItem):
                context.append(functions.call_item(entry.call_id, entry.name, entry.arguments, "completed", entry.id))
            else:
                context.append(_message(entry, where))
        return context.messages(system)

    def _on_conversation_item_delete(self, ev: p.ItemDelete) -> Output:
        try:
            self.conversation.delete(ev.item_id)
        except ItemError as exc:
            return self.error(exc.code, exc.message, ev.event_id, exc.param)
        return self._out(se.item_deleted(ev.item_id))

    def _on_conversation_item_retrieve(self, ev: p.ItemRetrieve) -> Output:
        item = self.conversation.get(ev.item_id)
        if item is None:
            return self.error("item_not_found", f"item {ev.item_id} not found", ev.event_id, "item_id")
        return self._out(se.item_retrieved(item))

    # ------------------------------------------------------------------ voice input

    def speech_started(self, item_id: str, audio_start_ms: int) -> Output:
        return self._out(se.speech_started(audio_start_ms, item_id))

    def speech_stopped(self, item_id: str, audio_end_ms: int) -> Output:
        return self._out(se.speech_stopped(audio_end_ms, item_id))

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
            se.input_committed(prev, item_id),
            se.item_added(prev, item),
        )

    def timeout_triggered(self, item_id: str, now_ms: int) -> Output:
        """No speech for ``turn_detection.idle_timeout_ms`` after a response: a response follows (GA)."""
        return self._out(se.input_timeout_triggered(now_ms, now_ms, item_id))

    def audio_cleared(self) -> Output:
        return self._out(se.input_cleared())

    def transcript_delta(self, item_id: str, delta: str) -> Output:
        return self._out(se.transcription_delta(item_id, delta))

    def transcript_done(self, item_id: str, transcript: str, seconds: float = 0.0) -> Output:
        """``seconds``: the audio transcribed, reported as GA's duration ``usage`` (required by strict clients)."""
        item = self.conversation.get(item_id)
        if item is None:  # deleted meanwhile
            return Output()
        item["content"][0]["transcript"] = transcript
        item["status"] = "completed"
        return self._out(
            se.transcription_completed(item_id, transcript, seconds),
            se.item_done(item),
        )

    def transcript_failed(self, item_id: str, code: str, message: str) -> Output:
        item = self.conversation.get(item_id)
        if item is not None:
            item["status"] = "incomplete"
            item["content"][0]["transcript"] = ""
        return self._out(se.transcription_failed(item_id, code, message))
