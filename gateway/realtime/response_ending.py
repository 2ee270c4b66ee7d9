"""How a response ended: the one value that travels from where the end is decided to ``response.done``. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

EndStatus = Literal["completed", "cancelled", "incomplete", "failed"]


@dataclass(frozen=True)
class ResponseEnding:
    """How a response ended, all that its ``response.done`` says of it besides the output: ``status``, why
    (``status_details``), and what it used. Built where the end is decided, read where the event is built."""

    status: EndStatus
    reason: str | None = None  # cancelled / incomplete: status_details.reason
    error_code: str | None = None  # failed: status_details.error.code, when one is known
    usage: Mapping[str, Any] = field(default_factory=dict)  # the Realtime ``usage`` object; empty: none
    metrics: dict[str, Any] | None = None  # the job's timings and counts (our ``metrics`` field)

    @classmethod
    def completed(cls, usage: Mapping[str, Any], metrics: dict[str, Any] | None) -> ResponseEnding:
        return cls("completed", usage=usage, metrics=metrics)

    @classmethod
    def cancelled(
        cls, reason: str, usage: Mapping[str, Any] | None = None, metrics: dict[str, Any] | None = None
    ) -> ResponseEnding:
        return cls("cancelled", reason, usage=usage or {}, metrics=metrics)

    @classmethod
    def incomplete(
        cls, reason: str, usage: Mapping[str, Any] | None = None, metrics: dict[str, Any] | None = None
    ) -> ResponseEnding:
        return cls("incomplete", reason, usage=usage or {}, metrics=metrics)

    @classmethod
    def failed(
        cls, error_code: str | None, usage: Mapping[str, Any] | None = None, metrics: dict[str, Any] | None = None
    ) -> ResponseEnding:
        return cls("failed", error_code=error_code, usage=usage or {}, metrics=metrics)

    def status_details(self) -> dict[str, Any] | None:
        if self.status == "completed":
            return None
        if self.status == "failed":
            code = {} if self.error_code is None else {"code": self.error_code}
            return {"type": "failed", "error": {"type": "server_error", **code}}
        return {"type": self.status, "reason": self.reason}


def ending_of(reason: str, metrics: dict[str, Any], usage: dict[str, Any]) -> ResponseEnding:
    """A finished job's ending: the engine's finish ``reason`` as the Realtime status and its details."""
    if reason == "stop":
        return ResponseEnding.completed(usage, metrics)
    if reason == "length":
        return ResponseEnding.incomplete("max_output_tokens", usage, metrics)
    if reason == "cancelled":
        return ResponseEnding.cancelled("client_cancelled", usage, metrics)
    if reason == "content_filter":  # a chunk filter stopped it (gateway.core.filters)
        return ResponseEnding.incomplete("content_filter", usage, metrics)
    return ResponseEnding.failed(metrics.get("error_code", "generation_failed"), usage, metrics)
