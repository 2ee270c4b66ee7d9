"""Which waiting synthesis runs next (pure): a reply's first chunks first, then the owners in turn.

Every speaking session and every ``/v1/audio/speech`` request share the TTS workers. Served in
arrival order, one tenant's long request (a 4,096-character text is a minute of synthesis) makes
everyone's voice wait behind it. So the queue keeps two tiers:

- urgent: a Realtime reply's first chunks (index below ``FIRST_CHUNKS``), lowest index first, then in
  arrival order. A reply's first audio is what a listener waits for, before the reply has any lead; it
  waits only for the syntheses already running, never behind another key's queued request. An HTTP
  request's first piece is urgent too when it is short (``SHORT_PIECE`` characters: a "Hi."), ranked
  after a reply's first chunk: as cheap as a reply's chunk, and its caller waits for its first audio as
  well. Longer pieces never are, so the synthesis thread that takes only urgent jobs
  (``gateway.voice.synthesis``) is never behind one of them;
- the rest (a reply's later chunks, which have seconds of lead, and HTTP pieces, each one bounded in
  length by the route) in deficit round robin over owners (an API key): each turn an owner may spend
  ``quantum`` characters, so a key with a long request and a key with a short one each get their
  share, and the short one finishes after a piece or two of the long one, not after all of it. Within
  an owner, jobs go lowest index first, then in arrival order.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

FIRST_CHUNKS = 3  # a Realtime reply's chunks taken as urgent: the first plays while the next two are made
SHORT_PIECE = 64  # an HTTP request's first piece this short is urgent: a reply chunk's cost (a first chunk is short)
QUANTUM = (
    64  # characters an owner may spend per turn: a short request goes at its first turn, a 200-character piece takes 4
)


@dataclass(order=True)
class _Entry(Generic[T]):
    rank: int
    seq: int
    cost: int = field(compare=False)
    job: T = field(compare=False)


@dataclass
class _QueueOwner(Generic[T]):
    jobs: list[_Entry[T]] = field(default_factory=list)  # sorted by (rank, seq)
    deficit: int = 0  # characters it may still spend this turn


class SynthesisQueue(Generic[T]):
    def __init__(self, quantum: int = QUANTUM) -> None:
        self.quantum = quantum
        self._urgent: list[_Entry[T]] = []  # sorted by (rank, seq)
        self._owners: dict[str, _QueueOwner[T]] = {}
        self._ring: deque[str] = deque()  # owners with jobs, whose turn comes in this order
        self._turn = False  # the first owner of the ring has had its quantum for this turn
        self._seq = itertools.count()

    def put(self, job: T, rank: int, owner: str = "", bulk: bool = False, cost: int = 1) -> None:
        """``rank``: the chunk's index in its reply or request (0: the first); ``owner``: whose turn it takes
        (an API key's digest); ``bulk``: an HTTP request's piece (urgent only as a short first piece);
        ``cost``: its characters."""
        entry = _Entry(max(0, rank), next(self._seq), max(1, cost), job)
        if bulk and entry.rank == 0 and entry.cost <= SHORT_PIECE:  # a short first piece: after a reply's first chunk
            entry.rank = FIRST_CHUNKS - 1
            _insert(self._urgent, entry)
            return
        if not bulk and entry.rank < FIRST_CHUNKS:
            _insert(self._urgent, entry)
            return
        o = self._owners.get(owner)
        if o is None:
            o = self._owners[owner] = _QueueOwner()
        if not o.jobs:
            self._ring.append(owner)
        _insert(o.jobs, entry)

    def take(self, max_rank: int | None = None) -> T | None:
        """The job to run next, or None when none waits (only urgent ones of rank ≤ ``max_rank``, when given:
        what a first-chunk thread takes)."""
        if self._urgent and (max_rank is None or self._urgent[0].rank <= max_rank):
            return self._urgent.pop(0).job
        if max_rank is not None:
            return None
        while self._ring:  # deficit round robin: each owner spends up to a quantum per turn
            name = self._ring[0]
            o = self._owners[name]
            if not self._turn:
                o.deficit += self.quantum
                self._turn = True
            head = o.jobs[0]
            if head.cost <= o.deficit:
                o.deficit -= head.cost
                o.jobs.pop(0)
                if not o.jobs:  # an idle owner keeps no credit
                    self._ring.popleft()
                    del self._owners[name]
                    self._turn = False
                return head.job
            self._ring.rotate(-1)  # its turn is over; what it did not spend stays for its next one
            self._turn = False
        return None

    def __len__(self) -> int:
        return len(self._urgent) + sum(len(o.jobs) for o in self._owners.values())


def _insert(entries: list[_Entry[T]], entry: _Entry[T]) -> None:
    """Keep ``entries`` sorted by (rank, seq): a new entry has the highest seq, so it goes after its rank."""
    i = len(entries)
    while i > 0 and entries[i - 1].rank > entry.rank:
        i -= 1
    entries.insert(i, entry)
