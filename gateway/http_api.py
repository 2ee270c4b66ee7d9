"""OpenAI-compatible HTTP API (POST /v1/chat/completions). Filled in by the HTTP work (issue 8)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.routing import BaseRoute


def routes(services: Callable[[], Any]) -> list[BaseRoute]:
    """Routes of the HTTP API; ``services()`` returns the app's ``Services`` once started."""
    return []
