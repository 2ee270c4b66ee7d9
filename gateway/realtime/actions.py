"""What the sans-I/O session hands the I/O layer: stamped events to send and actions to run. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from models.toolplan import ToolPlan

from ..tools.tool_actions import CallTool, ListTools
from ..voice.speech_actions import PlayAudio, Played, Speak
from . import protocol as p


@dataclass
class StartResponse:
    """Action: generate ``response_id`` from ``messages`` with these options."""

    response_id: str
    messages: list[dict[str, Any]]  # {role, content} (+ tool_calls of an assistant turn)
    sampling: SamplingParams
    scheduler: SchedulerConfig  # the server's defaults under the session's and the response's options
    output_modalities: list[str]
    tools: ToolPlan = field(default_factory=ToolPlan)  # tools in the prompt, forced calls


@dataclass
class CancelResponse:
    response_id: str


@dataclass
class StartImage:
    """Action: generate an image for ``response_id`` as output item ``item_id``."""

    response_id: str
    item_id: str
    prompt: str


# what a client event asks of the I/O layer (Session.handle): the voice layer's audio buffer, media to
# resolve, a refusal to count; each runs in the order its frame arrived


@dataclass(frozen=True)
class AppendAudio:
    """Action: add base64 pcm16 (or G.711) ``audio`` to the input audio buffer."""

    audio: str
    event_id: str | None


@dataclass(frozen=True)
class CommitAudio:
    """Action: the input audio buffer becomes a user turn."""

    event_id: str | None


@dataclass(frozen=True)
class ClearAudio:
    """Action: drop the input audio buffer."""


@dataclass(frozen=True)
class ResolveItem:
    """Action: turn ``event``'s media parts into text (transcripts, descriptions, files), after every item
    resolved before it, then hand it back (``inputs.ItemResolved``); responses wait for ``key``."""

    event: p.ItemCreate
    key: str


@dataclass(frozen=True)
class Refused:
    """Action: count a request the session refused for the server's sake (``server_busy``) in the metrics."""

    code: str


ClientAction = AppendAudio | CommitAudio | ClearAudio | ResolveItem | Refused
SpeechAction = Speak | PlayAudio | Played  # synthesis, a call's track, echo reference (gateway.voice)
Action = StartResponse | CancelResponse | StartImage | ListTools | CallTool | SpeechAction | ClientAction  # to run


@dataclass
class Output:
    events: list[dict[str, Any]] = field(default_factory=list)  # stamped server events, in order
    actions: list[Action] = field(default_factory=list)

    def extend(self, other: Output) -> Output:
        self.events.extend(other.events)
        self.actions.extend(other.actions)
        return self
