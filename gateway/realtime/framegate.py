"""Whether a socket reads a client frame: the socket's message rate, its API key's rate over all
replicas, its inbound bytes per second and a binary frame's size.

Pure: the caller passes the clock and the frame's size, and acts on the decision, as websockets'
shell acts on what its sans-I/O protocol returns. Both shells that read client frames act on it: a
local session's ``Connection`` and a cluster replica's ``Proxy`` (the session's owner elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core.config import LimitsConfig
from .protocol import CLOSE_POLICY, CLOSE_TOO_BIG
from .ratelimit import TokenBucket

# a flood is told it is refused on its first refused frame and every TELL_EVERY-th after, not on
# each: an error event per refused frame would amplify it
TELL_EVERY = 50


@dataclass(frozen=True)
class Admit:
    wait_s: float = 0.0  # handle it, then read the next frame no sooner: the socket is past its bytes/s


@dataclass(frozen=True)
class Refuse:
    tell: bool  # send the ``rate_limited`` error event for this one


@dataclass(frozen=True)
class Close:
    code: int
    reason: str


FrameDecision = Admit | Refuse | Close


class FrameGate:
    """One socket's admission. ``key_over_rate`` counts one frame of the socket's API key and says
    whether that key is over its rate across replicas (``gateway.cluster.node``); asked only for a
    frame the socket's own rate admits."""

    def __init__(self, limits: LimitsConfig, key_over_rate: Callable[[], bool] | None = None):
        self.limits = limits
        self.messages = TokenBucket(limits.messages_per_s, limits.messages_burst)
        self.bytes_in = TokenBucket(limits.inbound_bytes_per_s, limits.max_text_frame_bytes)
        self.key_over_rate = key_over_rate
        self.refused = 0  # frames refused in a row

    def admit(self, now: float, size: int, binary: bool) -> FrameDecision:
        """The decision on a frame of ``size`` bytes (a text frame's characters) read at ``now``."""
        if not self.messages.take(now) or (self.key_over_rate is not None and self.key_over_rate()):
            self.refused += 1
            if self.refused >= self.limits.flood_close_after:
                return Close(CLOSE_POLICY, "message flood")
            return Refuse(tell=self.refused == 1 or self.refused % TELL_EVERY == 0)
        self.refused = 0
        if binary and size > self.limits.max_binary_frame_bytes:
            return Close(CLOSE_TOO_BIG, "binary frame too large")
        return Admit(self.bytes_in.owe(now, size))
