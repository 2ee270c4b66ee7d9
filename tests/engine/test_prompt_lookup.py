"""Prompt-lookup drafting: n-gram matches, incremental index, brute-force agreement."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from models.drafters import PromptLookupDrafter
from tests.fuzzing import examples

# ----------------------------------------------------------------------------- prompt lookup


def reference_lookup(ctx: list[int], k: int, nmax: int = 3, nmin: int = 1) -> list[int]:
    """Brute force: longest n first, the most recent earlier occurrence, continued cyclically."""
    end = len(ctx)
    for n in range(min(nmax, end), nmin - 1, -1):
        suffix = ctx[end - n :]
        follows = [s + n for s in range(0, end - n) if ctx[s : s + n] == suffix]
        if follows:
            ext = ctx[follows[-1] :]
            out: list[int] = []
            for i in range(k):
                out.append(ext[i] if i < len(ext) else out[i - len(ext)])
            return out
    return []


def test_lookup_copies_what_followed_the_most_recent_match():
    d = PromptLookupDrafter()
    ctx = [5, 1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 4, 1, 2, 3]
    assert d.propose(ctx, 3) == [7, 8, 4]
    assert d.last_class == 3


def test_lookup_prefers_the_longest_ngram():
    d = PromptLookupDrafter()
    # "2 3" → 4 (2-gram match, older); "3" alone most recently → 0
    ctx = [2, 3, 4, 4, 3, 0, 6, 2, 3]
    assert d.propose(ctx, 2) == [4, 4]
    assert d.last_class == 2


def test_lookup_falls_back_to_shorter_and_gives_up():
    d = PromptLookupDrafter(ngram_max=3, ngram_min=2)
    assert d.propose([1, 2, 3, 4], 4) == []
    assert d.last_class == 0
    assert d.propose([1, 2, 3, 4, 2, 3], 2) == [4, 2]


def test_lookup_extends_a_periodic_pattern_past_the_end():
    d = PromptLookupDrafter()
    assert d.propose([7, 1, 2, 3, 1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1]
    assert d.propose([4, 4, 4], 5) == [4, 4, 4, 4, 4]


def test_lookup_indexes_incrementally():
    d = PromptLookupDrafter()
    ctx = list(range(50)) * 2
    d.propose(ctx, 4)
    size = sum(len(v) for v in d._index.values())
    assert size == 3 * len(ctx) - 3  # one entry per n-gram occurrence, built once
    d.propose([*ctx, 7], 4)  # one more token: three more entries, nothing rescanned
    assert sum(len(v) for v in d._index.values()) == size + 3


@settings(max_examples=examples(300), deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.lists(st.integers(0, 4), max_size=12), st.integers(0, 30), st.integers(1, 8)),
        min_size=1,
        max_size=12,
    )
)
def test_lookup_incremental_matches_brute_force(steps):
    """Grow, diverge (rewind), grow again: always the same as a fresh search over the context."""
    d = PromptLookupDrafter()
    ctx: list[int] = []
    for extra, keep, k in steps:
        ctx = ctx[: min(keep, len(ctx))] + extra
        assert d.propose(ctx, k) == reference_lookup(ctx, k)
    assert d.propose(ctx, 3) == PromptLookupDrafter().propose(ctx, 3)
