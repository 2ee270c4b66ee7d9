"""Which waiting synthesis runs next (pure): a reply's first chunk before any reply's later ones.

Every speaking session shares the TTS workers. Served in arrival order, a session that has just
begun to answer waits behind the chunks other sessions queued before it, one per speaking session;
served by chunk index, its first audio waits only for the syntheses already running. Later chunks
are not starved by it: a session synthesizes its next chunk while the client plays this one, so
one chunk of lead is all it needs, and first chunks come once per reply.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(order=True)
class _Entry(Generic[T]):
    rank: int
    seq: int
    job: T = field(compare=False)


class SynthesisQueue(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[_Entry[T]] = []
        self._seq = itertools.count()

    def put(self, job: T, rank: int) -> None:
        """``rank``: the chunk's index in its reply (0: the first); equal ranks go in arrival order."""
        heapq.heappush(self._heap, _Entry(max(0, rank), next(self._seq), job))

    def take(self, max_rank: int | None = None) -> T | None:
        """The job to run next, or None when none waits (of rank ≤ ``max_rank``, when given)."""
        if not self._heap or (max_rank is not None and self._heap[0].rank > max_rank):
            return None
        return heapq.heappop(self._heap).job

    def __len__(self) -> int:
        return len(self._heap)
