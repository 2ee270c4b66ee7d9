"""Request options shared by the WebSocket and HTTP APIs: one schema, one set of bounds."""

from __future__ import annotations

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
