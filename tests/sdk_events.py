"""Server events held to the pinned ``openai`` SDK's own types: the one ``RealtimeServerEvent`` adapter the
tests share, and which events are ours (``gateway.realtime.server_events.EXTENSION_TYPES``), not OpenAI's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from gateway.realtime.server_events import EXTENSION_TYPES

# what the Python Agents SDK validates each event with before it acts on it: an event that fails is dropped
SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


def is_extension(ev: dict[str, Any]) -> bool:
    return ev["type"] in EXTENSION_TYPES


def conform(events: list[dict[str, Any]]) -> list[str]:
    """Validate every non-extension event; the types seen, in order. Fails naming the event and field."""
    for ev in events:
        if is_extension(ev):
            continue
        try:
            SERVER_EVENT.validate_python(ev)
        except Exception as exc:  # the event, not just pydantic's message, in the failure
            pytest.fail(f"{ev['type']} does not validate as RealtimeServerEvent: {exc}\n{json.dumps(ev)[:2000]}")
    return [e["type"] for e in events]
