"""The WebRTC tests' servers check private candidates: their callers run on this machine, whose host
candidates are its LAN address, which a public server refuses by default (webrtc.allow_private_candidates)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def server_factory(server_factory: Callable[..., Any]) -> Callable[..., Any]:
    def make(backend: Any, **overrides: Any) -> Any:
        return server_factory(backend, **{"webrtc.allow_private_candidates": True, **overrides})

    return make
