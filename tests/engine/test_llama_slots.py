"""Which llama.cpp sequence a conversation takes (``models.llama_slots.pick_slot``): the ones that
decode together stay one run of consecutive ids, since llama.cpp computes one ubatch per run.
Pure tests on slot objects, then one on the embedded model through ``forward_batch``."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import pytest

from models.llama_slots import SeqHandle, Slot, pick_slot, plan_moves, spans


class Slots:
    """n slots; ``own`` marks some as held by a live conversation (kept alive here)."""

    def __init__(self, n: int):
        self.slots = [Slot(i) for i in range(n)]
        self._alive: list[SeqHandle] = []

    def own(self, *seqs: int) -> None:
        for seq in seqs:
            h = SeqHandle()
            h.slot = seq
            self._alive.append(h)
            self.slots[seq].owner = weakref.ref(h)

    def used(self, order: Sequence[int]) -> None:
        for t, seq in enumerate(order, start=1):
            self.slots[seq].used = t

    def arrive(self, n: int, running: set[int], target: Sequence[int] = ()) -> list[int]:
        """n new conversations bound in one call, as ``forward_batch`` does."""
        got = []
        for _ in range(n):
            seq = pick_slot(self.slots, running, list(target))
            self.own(seq)
            running.add(seq)
            got.append(seq)
        return got


def runs(seqs: set[int]) -> int:
    return sum(1 for s in seqs if s - 1 not in seqs)


def test_spans_are_the_maximal_runs() -> None:
    assert spans([True, True, False, True, False, False, True, True]) == [(0, 1), (3, 3), (6, 7)]
    assert spans([False, False]) == [] and spans([]) == []


def test_conversations_arriving_together_take_consecutive_slots() -> None:
    s = Slots(16)
    got = s.arrive(8, set())
    assert runs(set(got)) == 1, got


def test_idle_conversations_left_behind_do_not_split_the_next_group() -> None:
    # the bench's history: a warm-up and eight one-at-a-time sessions stay resident (detached)
    # on 0..8, least recently used first; eight new ones arrive in three steps
    s = Slots(16)
    s.own(*range(9))
    s.used(range(9))
    running: set[int] = set()
    got = s.arrive(3, running) + s.arrive(3, running) + s.arrive(2, running)
    assert runs(set(got)) == 1, got
    assert 8 in got and 0 not in got  # the idle neighbour goes, not the least recently used


def test_a_hole_between_running_conversations_is_filled_first() -> None:
    s = Slots(8)
    s.own(0, 1, 3, 4)
    assert pick_slot(s.slots, {0, 1, 3, 4}, []) == 2


def test_next_to_the_running_ones_beats_a_cached_prefix() -> None:
    s = Slots(12)
    s.own(3)
    s.slots[10].tokens = [1, 2, 3, 4]
    assert pick_slot(s.slots, {3}, [1, 2, 3, 4, 5]) in (2, 4)


def test_alone_a_cached_prefix_beats_a_longer_free_run() -> None:
    # a follow-up Chat Completions request finds its history where it left it: no copy
    s = Slots(12)
    s.own(1, 3)
    s.slots[2].tokens = [1, 2, 3, 4]
    assert pick_slot(s.slots, set(), [1, 2, 3, 4, 5]) == 2


def test_alone_without_a_prefix_the_longest_free_run_wins() -> None:
    s = Slots(12)
    s.own(1, 3, 5)
    got = pick_slot(s.slots, set(), [7])
    assert got >= 6, got


def test_a_parked_neighbour_beats_a_free_slot_apart_from_the_group() -> None:
    # the bench's history again, but the one-at-a-time sessions' clients are gone (parked)
    s = Slots(16)
    s.own(*range(9))
    for seq in range(9):
        s.slots[seq].parked = True
    running: set[int] = set()
    got = s.arrive(3, running) + s.arrive(3, running) + s.arrive(2, running)
    assert runs(set(got)) == 1, got
    assert 8 in got  # 9..15 are free, then the parked neighbour


def test_alone_a_free_slot_beats_a_parked_one() -> None:
    s = Slots(4)
    s.own(0, 1)
    s.slots[0].parked = True
    s.slots[2].tokens = [9]
    assert pick_slot(s.slots, set(), [1, 2]) in (2, 3)


def test_eviction_never_takes_a_running_slot() -> None:
    s = Slots(4)
    s.own(0, 1, 2, 3)
    s.used([1, 2, 3, 0])  # 1 is the least recently used but runs in this call
    assert pick_slot(s.slots, {1, 2}, []) in (0, 3)
    assert pick_slot(s.slots, {1, 2, 3}, []) == 0


def apply(moves: list[tuple[int, int]], running: set[int]) -> set[int]:
    for src, dst in moves:
        assert src in running and dst not in running
        running = (running - {src}) | {dst}
    return running


def test_a_departure_hole_is_closed_by_one_move() -> None:
    running = {0, 1, 2, 3, 4, 6, 7}
    open_ = [s == 5 for s in range(16)]
    moves = plan_moves(open_, running)
    assert moves == [(7, 5)]
    assert runs(apply(moves, running)) == 1


def test_stragglers_move_next_to_the_longest_run() -> None:
    running = {0, 1, *range(10, 16)}
    open_ = [2 <= s <= 9 for s in range(16)]
    moves = plan_moves(open_, running)
    assert len(moves) == 2 and runs(apply(moves, running)) == 1


def test_no_moves_when_nothing_borders_the_run() -> None:
    # the slots between are held by idle conversations that are not parked
    assert plan_moves([False] * 3 + [True] * 5, {0, 2}) == []
    assert plan_moves([False] * 8, {0, 1, 2}) == []


@pytest.mark.real_model
def test_a_conversation_moved_to_close_a_hole_decodes_bitwise_as_before() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'stream-omni[llama]')")
    import numpy as np

    from models.llama_cpp import LlamaCppBackend, LlamaCppConfig

    def run(departure: bool) -> tuple[list[np.ndarray], int]:
        b = LlamaCppBackend(LlamaCppConfig(threads=2, n_ctx=256, n_seq=4))
        try:
            a, mid, c = b.new_state(), b.new_state(), b.new_state()
            b.forward_batch([(a, [1, 2, 3], 1), (mid, [4, 5, 6], 1), (c, [7, 8, 9], 1)])
            if departure:
                del mid
            rows, nxt = [], [10, 11]
            for _ in range(6):
                la, lc = b.forward_batch([(a, [nxt[0]], 1), (c, [nxt[1]], 1)])
                rows += [la, lc]
                nxt = [int(la[-1].argmax()), int(lc[-1].argmax())]
            return rows, c.cache.slot
        finally:
            b.close()

    kept, slot_kept = run(False)
    moved, slot_moved = run(True)
    assert (slot_kept, slot_moved) == (2, 1)  # the hole closed only where the middle one left
    assert all(np.array_equal(x, y) for x, y in zip(kept, moved, strict=True))


@pytest.mark.real_model
def test_forward_batch_keeps_a_new_group_on_consecutive_sequences() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'stream-omni[llama]')")
    from models.llama_cpp import LlamaCppBackend, LlamaCppConfig

    b = LlamaCppBackend(LlamaCppConfig(threads=2, n_ctx=256, n_seq=8))
    try:
        # resident conversations one at a time, then every other one ends: holes at 1, 3, 5
        alone = {i: b.new_state() for i in range(6)}
        for i in alone:
            b.forward(alone[i], [100 + i, 200 + i])
        for i in (1, 3, 5):
            del alone[i]
        group = [b.new_state() for _ in range(3)]
        b.forward_batch([(st, [300 + i], 1) for i, st in enumerate(group)])
        seqs = {st.cache.slot for st in group}
        assert runs(seqs) == 1, seqs
        assert b.forward_batch([(st, [5], 1) for st in group])  # and they decode on
    finally:
        b.close()
