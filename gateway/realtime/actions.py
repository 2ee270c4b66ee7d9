"""What the sans-I/O session hands the I/O layer: stamped events to send and actions to run. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models.sampling import SamplingParams
from models.toolplan import ToolPlan

from ..tools.actions import CallTool, ListTools


@dataclass
class StartResponse:
    """Action: generate ``response_id`` from ``messages`` with these options."""

    response_id: str
    messages: list[dict[str, Any]]  # {role, content} (+ tool_calls of an assistant turn)
    sampling: SamplingParams
    scheduler: dict[str, Any]  # SchedulerOptions fields that are set
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


Action = StartResponse | CancelResponse | StartImage | ListTools | CallTool  # what the I/O layer must do


@dataclass
class Output:
    events: list[dict[str, Any]] = field(default_factory=list)  # stamped server events, in order
    actions: list[Action] = field(default_factory=list)

    def extend(self, other: Output) -> Output:
        self.events.extend(other.events)
        self.actions.extend(other.actions)
        return self
