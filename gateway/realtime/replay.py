"""Sans-I/O outbox: stamps ``seq`` and keeps recent events for replay after a reconnect.

Bounded in events and bytes (the oldest go first). ``since(n)`` answers every event with
``seq > n`` — or ``None`` when the buffer no longer holds ``n + 1``, so a resume never has a
silent gap.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from typing import Any


class ReplayBuffer:
    def __init__(self, max_events: int = 4096, max_bytes: int = 8 * 1024 * 1024):
        self.max_events = max_events  # events kept for replay
        self.max_bytes = max_bytes  # serialized bytes kept for replay
        self._events: deque[tuple[int, str]] = deque()  # (seq, JSON text)
        self._bytes = 0
        self.next_seq = 0  # the seq the next event gets

    def stamp(self, event: dict[str, Any]) -> dict[str, Any]:
        """Give ``event`` the next seq, serialize it once, keep it."""
        event["seq"] = self.next_seq
        text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        self._events.append((self.next_seq, text))
        self._bytes += len(text)
        self.next_seq += 1
        while self._events and (len(self._events) > self.max_events or self._bytes > self.max_bytes):
            _, old = self._events.popleft()
            self._bytes -= len(old)
        return event

    def load(self, events: list[tuple[int, str]], next_seq: int) -> None:
        """Start from a copy kept elsewhere (a session taken over from Redis): ``events`` (seq
        ascending, contiguous, ending at ``next_seq - 1``) are what this buffer holds now."""
        self._events = deque(events)
        self._bytes = sum(len(text) for _, text in events)
        self.next_seq = next_seq

    @property
    def first_seq(self) -> int:
        """Oldest seq still held (``next_seq`` when empty)."""
        return self._events[0][0] if self._events else self.next_seq

    def since(self, last_seq: int) -> list[tuple[int, str]] | None:
        """Events with seq > ``last_seq``; None if some of them were already dropped."""
        if last_seq < -1 or last_seq >= self.next_seq:
            return None  # a seq this session never sent
        want = last_seq + 1
        if want < self.first_seq:
            return None  # dropped: replaying would leave a gap
        return list(itertools.islice(self._events, want - self.first_seq, None))

    def __len__(self) -> int:
        return len(self._events)

    @property
    def nbytes(self) -> int:
        return self._bytes
