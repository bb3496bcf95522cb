"""The one set of statistics the distribution tests share: Pearson's chi-square, with rare
categories pooled, and its exact p-value (no scipy here: the regularised incomplete gamma)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

MIN_EXPECTED = 5.0  # below this a category's expected count is pooled with the other rare ones


def chi_square_sf(stat: float, df: int) -> float:
    """P(X >= stat) for X ~ chi-square with ``df`` degrees of freedom: Q(df/2, stat/2), by
    its series below a + 1 and its continued fraction above (Numerical Recipes' split)."""
    if stat <= 0:
        return 1.0
    a, x = df / 2.0, stat / 2.0
    log_prefix = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= x / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_prefix) * h


def _pool(expected: Mapping[int, float]) -> dict[int, int]:
    """Category -> bin: categories expected fewer than MIN_EXPECTED times share one bin (and
    if that bin is still rare, it joins the rarest common category)."""
    rare = [c for c, e in expected.items() if e < MIN_EXPECTED]
    common = sorted((c for c in expected if c not in rare), key=lambda c: expected[c])
    bins = {c: c for c in common}
    target = -1
    if rare and sum(expected[c] for c in rare) < MIN_EXPECTED and common:
        target = common[0]
    bins.update({c: target for c in rare})
    return bins


def goodness_of_fit_p(observed: Counter, expected: Mapping[int, float]) -> float:
    """p-value of ``observed`` counts against ``expected`` counts (same total; categories
    with zero expectation must not be observed: then the p-value is 0)."""
    if any(n and expected.get(c, 0.0) <= 0.0 for c, n in observed.items()):
        return 0.0
    bins = _pool(expected)
    obs: Counter = Counter()
    exp: Counter = Counter()
    for c, e in expected.items():
        exp[bins[c]] += e
        obs[bins[c]] += observed.get(c, 0)
    if len(exp) < 2:
        return 1.0
    stat = sum((obs[b] - e) ** 2 / e for b, e in exp.items() if e > 0)
    return chi_square_sf(stat, len(exp) - 1)


def homogeneity_p(a: Counter, b: Counter) -> float:
    """p-value that two samples of categories come from one distribution (Pearson's test of
    homogeneity, rare categories pooled by their pooled frequency)."""
    na, nb = sum(a.values()), sum(b.values())
    total = a + b
    bins = _pool({c: n * min(na, nb) / (na + nb) for c, n in total.items()})
    pa: Counter = Counter()
    pb: Counter = Counter()
    for c in total:
        pa[bins[c]] += a.get(c, 0)
        pb[bins[c]] += b.get(c, 0)
    if len(pa | pb) < 2:
        return 1.0
    stat = 0.0
    for cat in pa | pb:
        tot = pa[cat] + pb[cat]
        for n, obs in ((na, pa[cat]), (nb, pb[cat])):
            e = tot * n / (na + nb)
            stat += (obs - e) ** 2 / e
    return chi_square_sf(stat, len(pa | pb) - 1)
