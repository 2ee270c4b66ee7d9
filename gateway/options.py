"""Request options shared by the WebSocket and HTTP APIs: one schema, one set of bounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# the bounds of each scheduler knob, shared with the server's defaults (gateway.config.SchedulerDefaults)
MinChunkTokens = Annotated[int, Field(ge=1, le=512)]
MaxChunkTokens = Annotated[int, Field(ge=1, le=2048)]
LookaheadTokens = Annotated[int, Field(ge=0, le=32)]
Strategy = Literal["fast", "balanced", "quality"]
TaskHint = Literal["chat", "code", "summarize", "creative"]


class SchedulerOptions(BaseModel):
    """Extension: the chunk scheduler's knobs (``session.scheduler``, ``response.scheduler``, and
    ``scheduler`` in a Chat Completions body). Unset fields keep the server's defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    strategy: Strategy | None = None  # chunking preset
    min_chunk_tokens: MinChunkTokens | None = None  # no cut at a boundary before this
    max_chunk_tokens: MaxChunkTokens | None = None  # a chunk is forced out here
    lookahead_tokens: LookaheadTokens | None = None  # most draft tokens per verify (0: none)
    task_hint: TaskHint | None = None  # models.scheduler.TASK_HINTS
    eager_first: bool | None = None  # first chunk without waiting for its word's end (docs/REMOTE.md)


def model_refusal(served: Sequence[str], model: str, also: Sequence[str] = ()) -> str | None:
    """None when a server answering to ``served`` (its name, then its aliases) takes ``model``, or
    ``model`` is in ``also`` (ids an endpoint's clients send by default); else why not: the one
    ``model_not_found`` message of every endpoint."""
    if model in served or model in also:
        return None
    return f"the model {model[:100]!r} is not served here; this server serves {', '.join(repr(m) for m in served)}"
