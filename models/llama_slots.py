"""Which llama.cpp sequence (slot) each conversation's KV cache lives in: the pure policy behind
``models.llama_cpp``. llama.cpp computes a batch over per-sequence KV streams as one ubatch per
run of consecutive sequence ids, so the conversations that decode together are kept on one run:
``pick_slot`` places a new one, ``plan_moves`` closes the holes finished ones leave."""

from __future__ import annotations

import ctypes
import weakref

from .backend import common_prefix


class SeqHandle:
    """``KVState.cache`` of this backend: which slot the state is bound to (weakly owned)."""

    __slots__ = ("slot", "__weakref__")

    def __init__(self) -> None:
        self.slot: int | None = None


class Slot:
    """One llama.cpp sequence: the tokens its KV stream holds and the state that owns it."""

    __slots__ = ("seq", "tokens", "owner", "used", "parked", "seq_addr", "_seq_id")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.tokens: list[int] = []  # exactly the ids whose K/V this sequence holds
        self.owner: weakref.ref[SeqHandle] | None = None
        self.used = 0
        self.parked = False  # its owner's client is away (``park``) and it has not stepped since
        # batch.seq_id[i] of this slot's tokens points at this one int32 holding ``seq``
        self._seq_id = (ctypes.c_int32 * 1)(seq)
        self.seq_addr = ctypes.addressof(self._seq_id)

    def owned_by(self, handle: SeqHandle) -> bool:
        return self.owner is not None and self.owner() is handle

    def free(self) -> bool:
        return self.owner is None or self.owner() is None

    def takeable(self) -> bool:
        """Free, or held by a parked conversation."""
        return self.free() or self.parked


def open_slots(slots: list[Slot], running: set[int]) -> list[bool]:
    """Per slot: may a conversation of this call take it (free or parked, and not one of ``running``)."""
    return [s.takeable() and s.seq not in running for s in slots]


def spans(flags: list[bool]) -> list[tuple[int, int]]:
    """The maximal runs of True in ``flags``, as ``(first, last)`` index pairs in order."""
    out: list[tuple[int, int]] = []
    for i, flag in enumerate(flags):
        if flag and out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        elif flag:
            out.append((i, i))
    return out


def pick_slot(slots: list[Slot], running: set[int], target: list[int]) -> int:
    """The sequence a new or evicted conversation takes, ``running`` being the sequences of the
    same ``llama_decode`` call; → its ``seq``.

    llama.cpp computes a batch over per-sequence KV streams as one ubatch per run of consecutive
    sequence ids (``split_equal`` with ``sequential``), and each ubatch reads every weight again:
    eight one-token rows on ids 0, 1, 10–15 took 41.5 ms a step where 0–7 took 36 ms. Among the
    free and parked slots: first one next to the running ones (two neighbours: it joins two
    runs), then a free one over a parked one, then the longest cached prefix (what a follow-up
    request reuses without a copy), then the longest run of such slots around it (room for the
    ones that come next), then the least recently used. With none, the idle slot next to the
    running ones goes, else the least recently used."""

    def touching(seq: int) -> int:
        return (seq - 1 in running) + (seq + 1 in running)

    open_ = open_slots(slots, running)
    if any(open_):
        run = [0] * len(slots)  # length of the run of takeable slots each one is in
        for lo, hi in spans(open_):
            run[lo : hi + 1] = [hi - lo + 1] * (hi - lo + 1)
        best = max(
            (s for s in slots if open_[s.seq]),
            key=lambda s: (touching(s.seq), s.free(), common_prefix(s.tokens, target), run[s.seq], -s.used),
        )
    else:
        best = max((s for s in slots if s.seq not in running), key=lambda s: (touching(s.seq), -s.used))
    return best.seq


def plan_moves(open_: list[bool], running: set[int]) -> list[tuple[int, int]]:
    """Moves ``(from, to)`` that gather the ``running`` sequences into one run of consecutive
    ids (``pick_slot`` says why): the one farthest from the longest run goes first, onto an
    ``open_`` (takeable, not running) slot bordering that run; stops when none borders it. A
    move costs one copy of a KV stream (≈ 15 ms at 4096 tokens here), a split step ≈ 8 ms of
    every following step. Pure: the slots' flags in, the moves out."""
    running, open_ = set(running), list(open_)
    moves: list[tuple[int, int]] = []
    while True:
        runs = spans([s in running for s in range(len(open_))])
        if len(runs) <= 1:
            return moves
        lo, hi = max(runs, key=lambda r: (r[1] - r[0], -r[0]))
        src = max((s for s in running if not lo <= s <= hi), key=lambda s: lo - s if s < lo else s - hi)
        dsts = [d for d in (lo - 1, hi + 1) if 0 <= d < len(open_) and open_[d]]
        if not dsts:
            return moves
        dst = min(dsts, key=lambda d: abs(d - src))
        moves.append((src, dst))
        running.remove(src)
        running.add(dst)
        open_[src], open_[dst] = True, False


__all__ = ["SeqHandle", "Slot", "open_slots", "pick_slot", "plan_moves", "spans"]
