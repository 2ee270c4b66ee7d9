"""bench mix_bound's round arithmetic (pure: no model): when drafting for the grounded sessions of
a mix can shorten a round, and when it cannot."""

from __future__ import annotations

import math

import pytest

from bench.mix_bound import bound_rows

KS = [1, 2, 4, 8]
TOKENS = 128  # k + 1 = 3 and 9 leave a last, shorter grounded step


def costs(step: dict[int, float], n_grounded: int = 4, n_open: int = 4) -> dict[str, float]:
    """Step times for the shapes bench.mix_bound measures, from a cost per total rows."""
    return {
        "all x1": step[n_grounded + n_open],
        "open x1": step[n_open],
        **{f"k={k}": step[n_grounded * (1 + k) + n_open] for k in KS},
        **{f"k={k} rest": step[n_grounded * (TOKENS % (k + 1)) + n_open] for k in KS},
    }


def ceilings(cost: dict[str, float]) -> dict[int, float]:
    return {r["k"]: r["ceiling × none"] for r in bound_rows(cost, KS, TOKENS)}


ROWS = range(1, 64)


@pytest.mark.parametrize(("a", "b"), [(5.0, 7.5), (9.0, 4.8), (0.0, 1.0)])
def test_a_step_cost_affine_in_its_rows_leaves_the_round_as_long(a: float, b: float) -> None:
    got = ceilings(costs({r: a + b * r for r in ROWS}))
    assert all(math.isclose(c, 1.0, abs_tol=1e-3) for c in got.values()), got


def test_a_flat_step_cost_leaves_it_as_long_too_the_open_replies_set_the_steps() -> None:
    got = ceilings(costs(dict.fromkeys(ROWS, 40.0)))
    assert all(math.isclose(c, 1.0, abs_tol=1e-3) for c in got.values()), got


def test_only_rows_that_cost_less_than_in_proportion_shorten_it() -> None:
    # a step that grows with its rows, but whose extra rows past 8 cost a tenth as much
    step = {r: 10.0 + 5.0 * min(r, 8) + 0.5 * max(r - 8, 0) for r in ROWS}
    got = ceilings(costs(step))
    assert all(c > 1.2 for c in got.values()), got
    # and the round with drafting is built from the steps as the docstring says: k = 2 with 128
    # tokens is 42 full blocks and one of 2 tokens beside the open ones, then 85 steps of them alone
    row = next(r for r in bound_rows(costs(step), KS, TOKENS) if r["k"] == 2)
    assert row["grounded steps"] == 43
    want = (42 * step[4 * 3 + 4] + step[4 * 2 + 4] + 85 * step[4]) / 1000
    assert math.isclose(row["round s (all accepted)"], round(want, 2))
