"""The idle timeout of a voice session (``turn_detection.idle_timeout_ms``): a timer on the event loop.

Armed by each ``response.done``, stopped by ``speech_started`` or a new ``response.created``; when it runs
out with nobody speaking and no response running, the session says ``input_audio_buffer.timeout_triggered``
and answers, as GA does after a long pause on a phone call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class IdleTimer:
    def __init__(self, timeout: Callable[[], tuple[int, int] | None], fire: Callable[[int], None]):
        """``timeout()``: (idle_timeout_ms, the input clock's now) or None (no timeout, or speech now);
        ``fire(now_ms)``: the time ran out."""
        self._timeout = timeout
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None

    def seen(self, events: list[dict[str, Any]]) -> None:
        """Events the session just sent."""
        kinds = {e["type"] for e in events}
        if kinds & {"input_audio_buffer.speech_started", "response.created"}:
            self.stop()
        if "response.done" in kinds:
            idle = self._timeout()
            if idle is not None:
                self.stop()
                self._handle = asyncio.get_running_loop().call_later(idle[0] / 1000, self._ran_out)

    def _ran_out(self) -> None:
        self._handle = None
        idle = self._timeout()
        if idle is not None:  # still configured, and nobody is speaking
            self._fire(idle[1])

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
