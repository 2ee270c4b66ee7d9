"""The benches' paired statistics: a median with its bootstrap interval, and the tracing bench's comparison."""

from __future__ import annotations

import random

from bench.common import median_ci
from bench.tracing_bench import compare


def test_the_interval_holds_the_median_narrows_with_more_data_and_is_repeatable():
    rng = random.Random(1)
    few = [rng.gauss(3.0, 2.0) for _ in range(10)]
    many = few + [rng.gauss(3.0, 2.0) for _ in range(390)]
    m, lo, hi = median_ci(few)
    assert lo <= m <= hi
    _, lo_many, hi_many = median_ci(many)
    assert hi_many - lo_many < hi - lo and lo_many < 3.0 < hi_many
    assert median_ci(few) == (m, lo, hi)  # seeded: a rerun prints the same interval


def test_compare_pairs_rounds_so_drift_shared_by_both_servers_cancels():
    drift = [100.0 + 40 * i for i in range(12)]  # the box slows down over the run, for both servers alike
    rows = {"off": [{"ms": d} for d in drift], "on": [{"ms": d + 2.0} for d in drift]}
    assert compare(rows, "ms", "off", "on") == (2.0, 2.0, 2.0)
    assert compare(rows, "ms", "on", "off") == (-2.0, -2.0, -2.0)
