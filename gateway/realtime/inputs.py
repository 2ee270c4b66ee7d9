"""What the I/O layer tells the sans-I/O ``Session`` besides client events: each internal input its own type. Pure.

``Session.handle`` takes one ``Input``: a parsed client event, or one of these. The shells (``LiveSession``,
``MediaInput``, the WebRTC peer, a phone call, the MCP runner) report what happened (a chunk decoded, a
transcript came in, an MCP listing answered); the session answers with stamped events and actions
(``gateway.realtime.actions``). None of them is a client event in disguise: a reply the server itself
asks for is ``Reply`` / ``TurnEnded``, never a made-up ``response.create``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models.image_events import ImageEvent

from ..core.keylimits import BoundLimits
from ..voice.speech_actions import SpeechResult
from . import protocol as p
from .responses import ResponseState

# ------------------------------------------------------------------ the engine's results


@dataclass(frozen=True)
class EngineChunk:
    """Text the engine decoded for ``response_id`` (after the chunk filters)."""

    response_id: str
    text: str


@dataclass(frozen=True)
class ToolCallCut:
    """A whole ``<tool_call>`` body the scheduler cut out of ``response_id``'s text."""

    response_id: str
    body: str


@dataclass(frozen=True)
class Finished:
    """The engine ended ``response_id``'s generation: ``reason`` is stop, length, cancelled, content_filter
    or error (then ``metrics["error_code"]`` says which)."""

    response_id: str
    reason: str
    metrics: dict[str, Any] = field(default_factory=dict)  # the job's timings and token counts
    usage: dict[str, Any] = field(default_factory=dict)  # the Realtime usage object (responses.usage_of)


@dataclass(frozen=True)
class StartFailed:
    """``response_id`` could not start (context overflow, engine busy, bad options): it ends failed with
    ``code``, after an ``error`` event saying ``message`` when there is one."""

    response_id: str
    code: str
    message: str | None = None


@dataclass(frozen=True)
class ImageRequested:
    """The scheduler intercepted an image request in ``response_id``'s text."""

    response_id: str
    prompt: str


@dataclass(frozen=True)
class ImageProgressed:
    """The image generator's progress on item ``item_id`` of ``response_id``."""

    response_id: str
    item_id: str
    event: ImageEvent


@dataclass(frozen=True)
class SpeechMade:
    """A piece of a response's speech came back from synthesis (``gateway.voice.speaker``)."""

    result: SpeechResult


# ------------------------------------------------------------------ the voice input


@dataclass(frozen=True)
class VoiceStarted:
    """The VAD heard speech begin: user item ``item_id`` is being spoken."""

    item_id: str
    audio_start_ms: int


@dataclass(frozen=True)
class VoiceStopped:
    """The VAD heard speech end."""

    item_id: str
    audio_end_ms: int


@dataclass(frozen=True)
class AudioCommitted:
    """The input audio buffer became user item ``item_id``; its transcript is to come, and responses wait
    for it (``TranscriptDone`` / ``TranscriptFailed``, then ``TurnEnded``)."""

    item_id: str


@dataclass(frozen=True)
class AudioCleared:
    """The input audio buffer was dropped (``input_audio_buffer.clear``)."""


@dataclass(frozen=True)
class TranscriptDelta:
    item_id: str
    delta: str


@dataclass(frozen=True)
class TranscriptDone:
    item_id: str
    transcript: str
    seconds: float = 0.0  # the audio's length (usage)


@dataclass(frozen=True)
class TranscriptFailed:
    item_id: str
    code: str
    message: str


@dataclass(frozen=True)
class TurnEnded:
    """User item ``item_id``'s transcript is settled: a response held for it may start; ``respond``: the
    turn detector asks for a reply (create_response), which is held behind other pending items like any."""

    item_id: str
    respond: bool = False


@dataclass(frozen=True)
class IdleTimedOut:
    """Turn detection's idle timeout fired: the user said nothing for a while; the session answers
    (``input_audio_buffer.timeout_triggered`` and a reply) unless a response is in progress."""

    item_id: str  # the (empty) user item the timeout stands for
    now_ms: int  # the input clock


@dataclass(frozen=True)
class HeardUpTo:
    """A call's listener heard assistant item ``item_id`` only up to ``played_ms`` (a barge-in on a
    WebRTC or phone track): the item is cut there."""

    item_id: str
    played_ms: int


@dataclass(frozen=True)
class PlayOnTrack:
    """A call's media track plays the replies: speech goes out as ``PlayAudio`` actions, not as
    ``response.output_audio.delta`` events."""


# ------------------------------------------------------------------ items, tools, the response


@dataclass(frozen=True)
class ItemResolved:
    """Item ``key``'s media parts are text now (``event``), or it was refused (None): a response held for
    it may start (``ResolveItem``)."""

    key: str
    event: p.ItemCreate | None


@dataclass(frozen=True)
class McpListed:
    """An MCP server answered (or failed) a tools listing the session asked for (``ListTools``)."""

    label: str
    item_id: str
    tools: list[dict[str, Any]] | None
    error: str | None
    allowed: Any  # the allowed_tools filter the listing was for


@dataclass(frozen=True)
class McpResult:
    """An MCP call the session asked for (``CallTool``) returned ``output``, or failed with ``error``."""

    response_id: str
    item_id: str
    output: str | None
    error: dict[str, Any] | None


@dataclass(frozen=True)
class Cancel:
    """End the active response now, ``cancelled`` (a barge-in, the session closing)."""

    reason: str


@dataclass(frozen=True)
class Abandon:
    """End the active response ``incomplete``: the server failed it (its replica died)."""

    reason: str


@dataclass(frozen=True)
class Report:
    """An error the I/O layer found (a bad frame, a refused upload, the rate limit): sent as an ``error``
    event, stamped like every other."""

    code: str
    message: str
    event_id: str | None = None
    param: str | None = None


@dataclass(frozen=True)
class Opened:
    """The session opens: ``session.created`` (``resume``: its resume token and grace, ours, beside ``session``)."""

    resume: dict[str, Any] | None = None


@dataclass(frozen=True)
class Preset:
    """Before the session opens: its key's budgets, the id and config an ``ek_`` grant fixed (the config's
    fields are then locked), its audio input settings already checked by the voice layer. Answered with
    nothing, or the error refusing the config (the session must not open then)."""

    limiter: BoundLimits | None = None  # the key's response and token budgets (gateway.core.keylimits)
    session_id: str | None = None  # the id the client_secrets answer named
    update: p.SessionUpdate | None = None  # the grant's session config


@dataclass(frozen=True)
class Restored:
    """A replica takes the session over from its snapshot (``gateway.cluster.snapshot``): the fresh session
    becomes the one described, the running response with the text delivered after the snapshot included.
    Answered with nothing; ending that response is ``Abandon``'s."""

    session_id: str
    options: p.SessionOptions
    locked: frozenset[str]  # what an ek_ key fixed stays fixed
    items: list[dict[str, Any]]
    response: ResponseState | None


Internal = (
    EngineChunk
    | ToolCallCut
    | Finished
    | StartFailed
    | ImageRequested
    | ImageProgressed
    | SpeechMade
    | VoiceStarted
    | VoiceStopped
    | AudioCommitted
    | AudioCleared
    | TranscriptDelta
    | TranscriptDone
    | TranscriptFailed
    | TurnEnded
    | IdleTimedOut
    | HeardUpTo
    | PlayOnTrack
    | ItemResolved
    | McpListed
    | McpResult
    | Cancel
    | Abandon
    | Report
    | Opened
    | Preset
    | Restored
)
Input = p.ClientEvent | Internal  # everything Session.handle takes
