"""How many examples a hypothesis test draws: all of them in the full suite (the README's test
command, CI), a tenth in the inner loop (``pytest -m "not server and not real_model"``), which is
for quick feedback while editing. Set by ``tests/conftest.py`` from the run's marker expression."""

from __future__ import annotations

SCALE = 1.0  # the full count


def examples(n: int) -> int:
    """``n`` examples in the full suite; at least 10 in the inner loop."""
    return n if SCALE >= 1 else max(10, int(n * SCALE))
