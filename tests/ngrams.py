"""Counting repeats in a token sequence: what the repetition tests measure a penalty by."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def repeats(tokens: Sequence[Hashable], n: int) -> int:
    """How many of ``tokens``' n-grams occurred earlier in it."""
    seen: set[tuple[Hashable, ...]] = set()
    count = 0
    for i in range(len(tokens) - n + 1):
        g = tuple(tokens[i : i + n])
        count += g in seen
        seen.add(g)
    return count
