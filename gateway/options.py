"""Request options shared by the WebSocket and HTTP APIs: one schema, one set of bounds."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SchedulerOptions(BaseModel):
    """Extension: the chunk scheduler's knobs (``session.scheduler``, ``response.scheduler``, and
    ``scheduler`` in a Chat Completions body). Unset fields keep the server's defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    strategy: Literal["fast", "balanced", "quality"] | None = None  # chunking preset
    min_chunk_tokens: int | None = Field(default=None, ge=1, le=512)  # no cut at a boundary before this
    max_chunk_tokens: int | None = Field(default=None, ge=1, le=2048)  # a chunk is forced out here
    lookahead_tokens: int | None = Field(default=None, ge=0, le=32)  # most draft tokens per verify (0: none)
    task_hint: Literal["chat", "code", "summarize", "creative"] | None = None  # models.scheduler.TASK_HINTS
    eager_first: bool | None = None  # first chunk without waiting for its word's end (docs/REMOTE.md)
