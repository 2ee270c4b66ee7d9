"""Per-API-key response and token budgets in fixed windows (``limits.key_responses_per_window`` …).

Pure: the clock is passed in. Every Realtime response of a key (and of the ``ek_`` keys it minted)
counts one request when it starts and its tokens (input + output, as ``response.done`` reports
them) when it ends. A key whose requests or tokens of the current window are spent has its next
``response.create`` refused until the window resets. What is left goes to the client in
``rate_limits.updated`` after each ``response.done``: these are the figures, not estimates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

MAX_KEYS = 100_000  # key digests tracked at once; the least recently used go first


@dataclass(frozen=True)
class RateLimit:
    """One entry of ``rate_limits.updated`` (GA's ``RateLimit``)."""

    name: Literal["requests", "tokens"]
    limit: int
    remaining: int
    reset_seconds: float

    def message(self) -> str:
        """Why a response is refused, for the client."""
        reset = math.ceil(self.reset_seconds)
        return f"this API key's {self.name} limit ({self.limit}) is spent; it resets in {reset} s"

    def wire(self) -> dict[str, object]:
        return {
            "name": self.name,
            "limit": self.limit,
            "remaining": self.remaining,
            "reset_seconds": round(self.reset_seconds, 3),
        }


@dataclass
class _Usage:
    window: int  # index of the window these counts are for
    requests: int = 0
    tokens: int = 0


class KeyLimits:
    def __init__(self, requests: int | None, tokens: int | None, window_s: float, clock: Callable[[], float]):
        """``requests``: responses per key per window; ``tokens``: tokens per key per window (None: no
        cap on that one); ``clock``: seconds (monotonic or wall; windows are ``floor(now / window_s)``)."""
        self.requests = requests
        self.tokens = tokens
        self.window_s = window_s
        self.clock = clock
        self._usage: dict[str, _Usage] = {}

    @property
    def enabled(self) -> bool:
        return self.requests is not None or self.tokens is not None

    def _current(self, key: str) -> tuple[_Usage, float]:
        now = self.clock()
        window = int(now // self.window_s)
        u = self._usage.pop(key, None)
        if u is None or u.window != window:
            u = _Usage(window)
        self._usage[key] = u  # most recently used last
        while len(self._usage) > MAX_KEYS:
            self._usage.pop(next(iter(self._usage)))
        return u, (window + 1) * self.window_s - now

    def admit(self, key: str) -> RateLimit | None:
        """Count one response of ``key``; or, when its requests or tokens are spent, the limit that is
        (nothing counted): the response is refused until ``reset_seconds`` have passed."""
        u, reset = self._current(key)
        if self.requests is not None and u.requests >= self.requests:
            return RateLimit("requests", self.requests, 0, reset)
        if self.tokens is not None and u.tokens >= self.tokens:
            return RateLimit("tokens", self.tokens, 0, reset)
        u.requests += 1
        return None

    def charge(self, key: str, tokens: int) -> None:
        """A response of ``key`` ended having used ``tokens`` (it may overdraw the last bit of a budget)."""
        u, _ = self._current(key)
        u.tokens += max(0, tokens)

    def figures(self, key: str) -> list[RateLimit]:
        """What ``key`` has left in the current window, one entry per configured limit."""
        u, reset = self._current(key)
        out = []
        if self.requests is not None:
            out.append(RateLimit("requests", self.requests, max(0, self.requests - u.requests), reset))
        if self.tokens is not None:
            out.append(RateLimit("tokens", self.tokens, max(0, self.tokens - u.tokens), reset))
        return out

    def bound(self, key: str) -> BoundLimits:
        return BoundLimits(self, key)


@dataclass(frozen=True)
class BoundLimits:
    """One session's view: the limits of the key it is bound to."""

    limits: KeyLimits
    key: str

    def admit(self) -> RateLimit | None:
        return self.limits.admit(self.key)

    def charge(self, tokens: int) -> list[RateLimit]:
        """Count a finished response's tokens; the figures left after it."""
        self.limits.charge(self.key, tokens)
        return self.limits.figures(self.key)
