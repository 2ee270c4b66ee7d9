"""The WebRTC tests' servers check private candidates: their callers run on this machine, whose host
candidates are its LAN address, which a server with API keys refuses by default (webrtc.allow_private_candidates)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import checking_private_candidates


@pytest.fixture
def server_factory(server_factory: Callable[..., Any]) -> Callable[..., Any]:
    return checking_private_candidates(server_factory)
