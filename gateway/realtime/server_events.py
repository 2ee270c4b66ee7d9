"""Every server event the gateway sends, one typed builder per event type. Pure.

A builder's keyword parameters are the event's fields, in wire order, so a call site can neither misspell
a field nor leave out a required one (mypy checks each call). Each returns the event as the JSON object
it is sent as: ``type`` first, then ``event_id``, then its fields (``seq`` is stamped later by the
session's outbox; ``gateway.cluster.snapshot`` relies on ``type`` coming first). Items, parts and
session views stay dicts: they are built by the modules that own them.

Every event here but those in ``EXTENSION_TYPES`` is a GA event and validates as the ``openai`` SDK's
``RealtimeServerEvent`` (``tests/realtime/test_server_events.py`` builds each one and checks).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .protocol import clean

ServerEvent = dict[str, Any]
Wire = Mapping[str, Any]  # an item, content part, session or response object as sent

# ours, not OpenAI's (docs/PROTOCOL.md, "Extensions"): each is sent only to a client that asked for it
EXTENSION_TYPES: Final = frozenset(
    {
        "session.resumed",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.generating",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.completed",
    }
)

_event_counter = itertools.count()


def _envelope(type_: str, **fields: Any) -> ServerEvent:
    return {"type": type_, "event_id": f"event_{next(_event_counter):x}", **fields}


class Absent(enum.Enum):
    """A field left out of the event (not sent as null)."""

    ABSENT = enum.auto()


ABSENT: Final = Absent.ABSENT


@dataclass(frozen=True)
class PartAt:
    """Where a content part's events point: its response, item, output item and part."""

    response_id: str
    item_id: str
    output_index: int
    content_index: int = 0

    def fields(self) -> dict[str, Any]:
        return {
            "response_id": self.response_id,
            "item_id": self.item_id,
            "output_index": self.output_index,
            "content_index": self.content_index,
        }


# ---------------------------------------------------------------- session


def session_created(session: Wire, resume: Wire | None = None) -> ServerEvent:
    """``resume`` (ours, beside ``session``): the token and grace that let a client resume this session."""
    return _envelope("session.created", session=session, **({"resume": resume} if resume is not None else {}))


def session_updated(session: Wire) -> ServerEvent:
    return _envelope("session.updated", session=session)


def session_resumed(session: Wire, replay_from_seq: int, received_events: int) -> ServerEvent:
    """Ours: the first event on a resumed socket, before the replayed ones."""
    return _envelope(
        "session.resumed", session=session, replay_from_seq=replay_from_seq, received_events=received_events
    )


def error_event(
    code: str,
    message: str,
    event_id: str | None = None,
    param: str | None = None,
    type_: str = "invalid_request_error",
) -> ServerEvent:
    """``message`` is cleaned of object addresses and file paths before a client sees it."""
    return _envelope(
        "error",
        error={"type": type_, "code": code, "message": clean(message), "param": param, "event_id": event_id},
    )


def rate_limits_updated(rate_limits: Sequence[Wire]) -> ServerEvent:
    return _envelope("rate_limits.updated", rate_limits=list(rate_limits))


# ---------------------------------------------------------------- conversation items


def item_added(previous_item_id: str | None, item: Wire) -> ServerEvent:
    return _envelope("conversation.item.added", previous_item_id=previous_item_id, item=item)


def item_done(item: Wire, previous_item_id: str | None | Absent = ABSENT) -> ServerEvent:
    """``previous_item_id`` is sent only where the item entered the conversation with this event pair."""
    before = {} if previous_item_id is ABSENT else {"previous_item_id": previous_item_id}
    return _envelope("conversation.item.done", **before, item=item)


def item_deleted(item_id: str) -> ServerEvent:
    return _envelope("conversation.item.deleted", item_id=item_id)


def item_retrieved(item: Wire) -> ServerEvent:
    return _envelope("conversation.item.retrieved", item=item)


def item_truncated(item_id: str, content_index: int, audio_end_ms: int) -> ServerEvent:
    return _envelope(
        "conversation.item.truncated", item_id=item_id, content_index=content_index, audio_end_ms=audio_end_ms
    )


def transcription_delta(item_id: str, delta: str, content_index: int = 0) -> ServerEvent:
    return _envelope(
        "conversation.item.input_audio_transcription.delta", item_id=item_id, content_index=content_index, delta=delta
    )


def transcription_completed(item_id: str, transcript: str, seconds: float, content_index: int = 0) -> ServerEvent:
    """``seconds``: the audio transcribed, as GA's duration ``usage`` (strict clients require it)."""
    return _envelope(
        "conversation.item.input_audio_transcription.completed",
        item_id=item_id,
        content_index=content_index,
        transcript=transcript,
        usage={"type": "duration", "seconds": round(max(0.0, seconds), 3)},
    )


def transcription_failed(item_id: str, code: str, message: str, content_index: int = 0) -> ServerEvent:
    return _envelope(
        "conversation.item.input_audio_transcription.failed",
        item_id=item_id,
        content_index=content_index,
        error={"type": "transcription_error", "code": code, "message": message},
    )


# ---------------------------------------------------------------- input audio buffer


def speech_started(audio_start_ms: int, item_id: str) -> ServerEvent:
    return _envelope("input_audio_buffer.speech_started", audio_start_ms=audio_start_ms, item_id=item_id)


def speech_stopped(audio_end_ms: int, item_id: str) -> ServerEvent:
    return _envelope("input_audio_buffer.speech_stopped", audio_end_ms=audio_end_ms, item_id=item_id)


def input_committed(previous_item_id: str | None, item_id: str) -> ServerEvent:
    return _envelope("input_audio_buffer.committed", previous_item_id=previous_item_id, item_id=item_id)


def input_timeout_triggered(audio_start_ms: int, audio_end_ms: int, item_id: str) -> ServerEvent:
    return _envelope(
        "input_audio_buffer.timeout_triggered",
        audio_start_ms=audio_start_ms,
        audio_end_ms=audio_end_ms,
        item_id=item_id,
    )


def input_cleared() -> ServerEvent:
    return _envelope("input_audio_buffer.cleared")


def dtmf_received(event: str, received_at: int) -> ServerEvent:
    """A key a caller pressed (SIP calls): ``received_at`` in Unix seconds."""
    return _envelope("input_audio_buffer.dtmf_event_received", event=event, received_at=received_at)


# ---------------------------------------------------------------- output audio buffer (WebRTC and SIP)


def output_buffer_started(response_id: str) -> ServerEvent:
    return _envelope("output_audio_buffer.started", response_id=response_id)


def output_buffer_stopped(response_id: str) -> ServerEvent:
    return _envelope("output_audio_buffer.stopped", response_id=response_id)


def output_buffer_cleared(response_id: str | None) -> ServerEvent:
    return _envelope("output_audio_buffer.cleared", response_id=response_id)


# ---------------------------------------------------------------- responses


def response_created(response: Wire) -> ServerEvent:
    return _envelope("response.created", response=response)


def response_done(response: Wire) -> ServerEvent:
    return _envelope("response.done", response=response)


def output_item_added(response_id: str, output_index: int, item: Wire) -> ServerEvent:
    return _envelope("response.output_item.added", response_id=response_id, output_index=output_index, item=item)


def output_item_done(response_id: str, output_index: int, item: Wire) -> ServerEvent:
    return _envelope("response.output_item.done", response_id=response_id, output_index=output_index, item=item)


def content_part_added(at: PartAt, part: Wire) -> ServerEvent:
    return _envelope("response.content_part.added", **at.fields(), part=part)


def content_part_done(at: PartAt, part: Wire) -> ServerEvent:
    return _envelope("response.content_part.done", **at.fields(), part=part)


def output_text_delta(at: PartAt, delta: str) -> ServerEvent:
    return _envelope("response.output_text.delta", **at.fields(), delta=delta)


def output_text_done(at: PartAt, text: str) -> ServerEvent:
    return _envelope("response.output_text.done", **at.fields(), text=text)


def output_audio_delta(at: PartAt, delta: str) -> ServerEvent:
    """``delta``: base64 audio in the session's output format."""
    return _envelope("response.output_audio.delta", **at.fields(), delta=delta)


def output_audio_done(at: PartAt) -> ServerEvent:
    return _envelope("response.output_audio.done", **at.fields())


def audio_transcript_delta(at: PartAt, delta: str) -> ServerEvent:
    return _envelope("response.output_audio_transcript.delta", **at.fields(), delta=delta)


def audio_transcript_done(at: PartAt, transcript: str) -> ServerEvent:
    return _envelope("response.output_audio_transcript.done", **at.fields(), transcript=transcript)


def function_arguments_delta(
    response_id: str, item_id: str, output_index: int, call_id: str, delta: str
) -> ServerEvent:
    return _envelope(
        "response.function_call_arguments.delta",
        response_id=response_id,
        item_id=item_id,
        output_index=output_index,
        call_id=call_id,
        delta=delta,
    )


def function_arguments_done(
    response_id: str, item_id: str, output_index: int, call_id: str, name: str, arguments: str
) -> ServerEvent:
    return _envelope(
        "response.function_call_arguments.done",
        response_id=response_id,
        item_id=item_id,
        output_index=output_index,
        call_id=call_id,
        name=name,
        arguments=arguments,
    )


# ---------------------------------------------------------------- MCP (gateway.tools)


def mcp_list_in_progress(item_id: str) -> ServerEvent:
    return _envelope("mcp_list_tools.in_progress", item_id=item_id)


def mcp_list_completed(item_id: str) -> ServerEvent:
    return _envelope("mcp_list_tools.completed", item_id=item_id)


def mcp_list_failed(item_id: str) -> ServerEvent:
    return _envelope("mcp_list_tools.failed", item_id=item_id)


def mcp_arguments_delta(response_id: str, item_id: str, output_index: int, delta: str) -> ServerEvent:
    return _envelope(
        "response.mcp_call_arguments.delta",
        response_id=response_id,
        item_id=item_id,
        output_index=output_index,
        delta=delta,
    )


def mcp_arguments_done(response_id: str, item_id: str, output_index: int, arguments: str) -> ServerEvent:
    return _envelope(
        "response.mcp_call_arguments.done",
        response_id=response_id,
        item_id=item_id,
        output_index=output_index,
        arguments=arguments,
    )


def mcp_call_in_progress(item_id: str, output_index: int) -> ServerEvent:
    return _envelope("response.mcp_call.in_progress", item_id=item_id, output_index=output_index)


def mcp_call_completed(item_id: str, output_index: int) -> ServerEvent:
    return _envelope("response.mcp_call.completed", item_id=item_id, output_index=output_index)


def mcp_call_failed(item_id: str, output_index: int) -> ServerEvent:
    return _envelope("response.mcp_call.failed", item_id=item_id, output_index=output_index)


# ---------------------------------------------------------------- generated images (ours)


def image_call_in_progress(item_id: str, output_index: int) -> ServerEvent:
    """Ours: an image output item started."""
    return _envelope("response.image_generation_call.in_progress", item_id=item_id, output_index=output_index)


def image_call_generating(item_id: str, output_index: int) -> ServerEvent:
    """Ours: the image generator is at work on it."""
    return _envelope("response.image_generation_call.generating", item_id=item_id, output_index=output_index)


def image_call_completed(item_id: str, output_index: int) -> ServerEvent:
    """Ours: the image is done (its ``response.output_item.done`` carries it)."""
    return _envelope("response.image_generation_call.completed", item_id=item_id, output_index=output_index)


def image_call_partial(
    item_id: str, output_index: int, partial_image_index: int, partial_image_b64: str
) -> ServerEvent:
    """Ours: a partial image of an image output item (base64 PNG)."""
    return _envelope(
        "response.image_generation_call.partial_image",
        item_id=item_id,
        output_index=output_index,
        partial_image_index=partial_image_index,
        partial_image_b64=partial_image_b64,
    )
