"""Token bucket (sans-I/O: the caller passes the clock)."""

from __future__ import annotations


class TokenBucket:
    def __init__(self, rate_per_s: float, burst: float):
        self.rate = rate_per_s  # tokens added per second
        self.burst = burst  # bucket size
        self.tokens = burst
        self.last: float | None = None

    def take(self, now: float, n: float = 1.0) -> bool:
        """Spend ``n`` tokens if available."""
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False

    def owe(self, now: float, n: float) -> float:
        """Spend ``n`` tokens even past empty; the seconds until the balance is back to zero."""
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= n
        return max(0.0, -self.tokens / self.rate)
