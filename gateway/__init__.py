"""Stream-Omni's gateway. ``from gateway import StreamOmni`` is the in-process API (gateway.wiring.inprocess)."""

from __future__ import annotations

from typing import Any

__all__ = ["ResponseStream", "StreamChunk", "StreamOmni", "StreamOmniError"]


def __getattr__(name: str) -> Any:
    # imported on first use: `import gateway.core.config` (the CLI, the tests) should not load the engine's modules
    if name in __all__:
        from .wiring import inprocess

        return getattr(inprocess, name)
    raise AttributeError(f"module 'gateway' has no attribute {name!r}")
