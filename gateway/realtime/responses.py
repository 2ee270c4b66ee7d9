"""One assistant response's state and the server events that open and close it. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import server_events as se
from .conversation import Item
from .response_ending import ResponseEnding
from .speech_out import AudioState, audio_part, usage_with_audio


@dataclass
class ResponseState:
    id: str
    item_id: str  # the assistant message item its text goes to
    modalities: list[str]
    store: bool  # conversation "auto" (True) or "none"
    text: str = ""  # delivered text only
    started: bool = False  # item/part events sent
    images: dict[str, dict[str, Any]] = field(default_factory=dict)  # image_generation_call items by id
    calls: list[Item] = field(default_factory=list)  # function_call items, each whole (see functions.py)
    known_tools: frozenset[str] = frozenset()  # names a call may carry
    mcp: list[Item] = field(default_factory=list)  # MCP items it made, in order (gateway.tools.mcp_session)
    ending: ResponseEnding | None = None  # text finished; response.done waits for images or speech
    # echoed in response.created/done as OpenAI does: LiveKit Agents matches a reply to its
    # response.create through metadata.client_event_id (without it generate_reply() times out)
    metadata: dict[str, Any] | None = None
    conversation_id: str | None = None  # None for conversation "none" (out-of-band)
    audio: AudioState | None = None  # the spoken part (output modality "audio"); None: text only

    @property
    def waiting(self) -> bool:
        """Something besides the text is still being made: response.done waits for it."""
        return self.images_pending or (self.audio is not None and self.audio.pending)

    parallel: bool = True  # parallel_tool_calls: False keeps the first call only
    indexes: dict[str, int] = field(default_factory=dict)  # output item id → output_index, in order produced
    held: str = ""  # whitespace before any text: sent only if text follows (a forced call's newline is not a reply)

    def take_index(self, item_id: str) -> int:
        """The next output_index, for ``item_id``: items are numbered in the order they are produced."""
        self.indexes[item_id] = len(self.indexes)
        return self.indexes[item_id]

    @property
    def text_index(self) -> int:
        return self.indexes.get(self.item_id, 0)

    @property
    def images_pending(self) -> bool:
        return any(i["status"] == "in_progress" for i in self.images.values())

    def item(self, status: str) -> Item:
        """The assistant message item as it stands."""
        return {
            "id": self.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": [self._part()] if self.started or status == "in_progress" else [],
        }

    def _part(self) -> dict[str, Any]:
        return audio_part(self.audio.transcript) if self.audio else {"type": "output_text", "text": self.text}

    def start_events(self, previous_item_id: str | None) -> list[dict[str, Any]]:
        """The events before the first text delta (the item and its text part open)."""
        self.started = True
        index = self.take_index(self.item_id)
        item = self.item("in_progress")
        item["content"] = []
        return [
            se.output_item_added(self.id, index, item),
            # an out-of-band reply (conversation "none") never enters the conversation: no conversation.item.*
            *([se.item_added(previous_item_id, item)] * self.store),
            se.content_part_added(
                se.PartAt(self.id, self.item_id, index),
                {"type": "audio", "transcript": ""} if self.audio else {"type": "text", "text": ""},
            ),
        ]


def usage_of(metrics: dict[str, Any]) -> dict[str, Any]:
    """A finished job's token counts (its ``metrics``) as the Realtime ``usage`` object; empty without them."""
    if "tokens" not in metrics:
        return {}
    prompt = metrics.get("prompt_tokens", 0) + metrics.get("cached_tokens", 0)
    return {
        "total_tokens": prompt + metrics["tokens"],
        "input_tokens": prompt,
        "output_tokens": metrics["tokens"],
        "input_token_details": {"cached_tokens": metrics.get("cached_tokens", 0)},
    }


def final_events(r: ResponseState, item: Item | None, ending: ResponseEnding) -> list[dict[str, Any]]:
    """Everything that closes ``r``: its text part and item (``item``, when text went out), images
    still denoising (incomplete), then exactly one ``response.done``."""
    events: list[dict[str, Any]] = []
    output: list[tuple[int, dict[str, Any]]] = []  # (output_index, item): listed in the order produced
    if item is not None:
        index = r.text_index
        at = se.PartAt(r.id, r.item_id, index)
        if r.audio is not None:
            said = r.audio.transcript
            events += [
                se.output_audio_done(at),
                se.audio_transcript_done(at, said),
                se.content_part_done(at, {"type": "audio", "transcript": said}),
            ]
        else:
            events += [
                se.output_text_done(at, r.text),
                se.content_part_done(at, {"type": "text", "text": r.text}),
            ]
        events += [
            se.output_item_done(r.id, index, item),
            *([se.item_done(item)] * r.store),
        ]
        output.append((index, item))
    for img in r.images.values():
        if img["status"] == "in_progress":  # cancelled with the response
            img["status"] = "incomplete"
            view = {"id": img["id"], "type": "image_generation_call", "status": "incomplete"}
            events.append(se.output_item_done(r.id, img["output_index"], view))
        output.append((img["output_index"], {k: v for k, v in img.items() if k != "output_index"}))
    output.extend((r.indexes.get(call["id"], len(r.indexes)), call) for call in r.calls)
    output.extend((r.indexes.get(item["id"], len(r.indexes)), item) for item in r.mcp)
    usage = dict(ending.usage)
    events.append(
        se.response_done(
            {
                "id": r.id,
                "object": "realtime.response",
                "status": ending.status,
                "status_details": ending.status_details(),
                "output": [o for _, o in sorted(output, key=lambda x: x[0])],
                "output_modalities": r.modalities,
                "conversation_id": r.conversation_id,
                "metadata": r.metadata,
                "usage": (usage_with_audio(usage, r.audio.audio_ms) if r.audio else usage) or None,
                "metrics": ending.metrics or None,
            }
        )
    )
    return events
