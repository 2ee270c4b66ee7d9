"""Request body bytes per second per API key over the HTTP API (token buckets; sans-I/O, clock injected).

A request's body costs the server CPU however it ends (parsed, validated, refused), and on a small
machine that CPU is taken from every running decode. So each key has a budget of body bytes per
second; a request costs its declared length, and at least ``MIN_COST`` (small requests cost
parsing and routing too). Past the budget a request is refused before its body is read.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from ..realtime.ratelimit import TokenBucket

MIN_COST = 16 * 1024  # bytes one request costs at least: parsing and routing are work too
MAX_KEYS = 10_000  # buckets kept; the least recently used goes first (it was full again anyway)


class ByteBudget:
    def __init__(self, rate: float, burst: float, max_keys: int = MAX_KEYS):
        self.rate = rate  # bytes per second per key
        self.burst = burst  # a key's bucket: at least one largest request
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def admit(self, key: str, size: int | None, now: float) -> float:
        """Spend a request's cost (``size``: its declared body length, None when not declared);
        0 when admitted, else the whole seconds until the key's budget covers it (Retry-After)."""
        cost = min(self.burst, max(MIN_COST, size or 0))
        bucket = self._buckets.pop(key, None) or TokenBucket(self.rate, self.burst)
        self._buckets[key] = bucket  # most recently used last
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        if bucket.take(now, cost):
            return 0.0
        return float(max(1, math.ceil((cost - bucket.tokens) / self.rate)))
