"""The shared statistics helper against textbook values and a simulation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.support.statistics import chi_square_sf, goodness_of_fit_p, homogeneity_p


@pytest.mark.parametrize(
    ("stat", "df", "p"),
    [(3.841459, 1, 0.05), (6.634897, 1, 0.01), (5.991465, 2, 0.05), (23.209251, 10, 0.01),
     (0.5, 3, 0.918891), (124.342, 100, 0.05)],
)  # fmt: skip
def test_chi_square_tail_matches_tables(stat, df, p):
    assert chi_square_sf(stat, df) == pytest.approx(p, rel=1e-4)


def test_the_tests_accept_what_is_true_and_reject_a_ten_point_shift():
    rng = np.random.default_rng(0)
    probs = np.array([0.5, 0.3, 0.15, 0.04, 0.01])
    expected = {i: 400 * p for i, p in enumerate(probs)}
    same = Counter(rng.choice(5, 400, p=probs).tolist())
    shifted = Counter(rng.choice(5, 400, p=[0.4, 0.4, 0.15, 0.04, 0.01]).tolist())
    assert goodness_of_fit_p(same, expected) > 0.01
    assert goodness_of_fit_p(shifted, expected) < 0.01
    assert homogeneity_p(same, Counter(rng.choice(5, 400, p=probs).tolist())) > 0.01
    assert goodness_of_fit_p(Counter({0: 399, 7: 1}), expected) == 0.0  # impossible token
