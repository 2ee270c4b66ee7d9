"""Request body bytes per second per API key over the HTTP API (token buckets; sans-I/O, clock injected).

A request's body costs the server CPU however it ends (parsed, validated, refused), and on a small
machine that CPU is taken from every running decode. So each key has a budget of body bytes per
second; a request costs its declared length, and at least ``MIN_COST`` (small requests cost
parsing and routing too), and at most ``REQUEST_BURST`` requests go through at once: the bytes'
burst is sized for one largest body, which would otherwise admit a hundred tiny requests in a
row. Past the budget a request is refused before its body is read.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from ..realtime.ratelimit import TokenBucket

# bytes one request costs at least: parsing, routing and answering are work too (a tiny upload is
# ~1.6 ms of CPU, and a decode on 2 cores loses more than that: every request preempts it); at the
# 4 MiB/s default a key makes 32 small requests a second
MIN_COST = 128 * 1024
REQUEST_BURST = 32  # small requests a key may send at once
MAX_KEYS = 10_000  # buckets kept; the least recently used goes first (it was full again anyway)


class ByteBudget:
    def __init__(self, rate: float, burst: float, max_keys: int = MAX_KEYS):
        self.rate = rate  # bytes per second per key
        self.burst = burst  # a key's bucket: at least one largest request
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[TokenBucket, TokenBucket]] = OrderedDict()  # (bytes, requests)

    def admit(self, key: str, size: int | None, now: float) -> float:
        """Spend a request's cost (``size``: its declared body length, None when not declared);
        0 when admitted, else the whole seconds until the key's budget covers it (Retry-After)."""
        cost = min(self.burst, max(MIN_COST, size or 0))
        buckets = self._buckets.pop(key, None) or (
            TokenBucket(self.rate, self.burst),
            TokenBucket(self.rate / MIN_COST, REQUEST_BURST),
        )
        self._buckets[key] = buckets  # most recently used last
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        data, requests = buckets
        if not data.take(now, cost):
            return float(max(1, math.ceil((cost - data.tokens) / data.rate)))
        if not requests.take(now):
            data.tokens += cost  # a refused request costs nothing
            return float(max(1, math.ceil((1 - requests.tokens) / requests.rate)))
        return 0.0
