"""The few distributions the statistics need, in pure Python: Student's t and the exact binomial test.

The package must not depend on scipy (a plugin every CI job installs), yet small-sample intervals
need t quantiles and McNemar's exact test needs binomial tails. These are the textbook algorithms
(the regularized incomplete beta by Lentz's continued fraction, Numerical Recipes 6.4), checked
against scipy in ``tests/scoring/test_statistics.py`` to 1e-9.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

_EPS = 1e-15
_TINY = 1e-300
_MAX_TERMS = 500


def normal_ppf(q: float) -> float:
    """The standard normal quantile (the stdlib's, named beside ``t_ppf``)."""
    return NormalDist().inv_cdf(q)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * beta_inc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=1024)
def t_ppf(q: float, df: float) -> float:
    """The quantile of Student's t: bisection on ``t_cdf``, which is monotone, to float precision.
    Cached: every interval of a run asks for the same few (0.975 at its task count), and a
    simulation of thousands of intervals asked for each anew (a bisection of ~60 incomplete betas)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"need 0 < q < 1, got {q}")
    if q == 0.5:
        return 0.0
    low, high = -1.0, 1.0
    while t_cdf(low, df) > q:
        low *= 2.0
    while t_cdf(high, df) < q:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if mid in (low, high):
            break
        if t_cdf(mid, df) < q:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def binomial_two_sided_half(successes: int, n: int) -> float:
    """The exact two-sided p-value of ``successes`` in ``n`` trials at p = 1/2 (McNemar's exact test).

    The distribution is symmetric, so the two-sided value is twice the smaller tail, at most 1:
    what ``scipy.stats.binomtest(successes, n, 0.5)`` gives. No trials at all: 1.
    """
    if n == 0:
        return 1.0
    low = min(successes, n - successes)
    # Integers throughout: Python divides them exactly rounded, however large 2**n grows.
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(low + 1)) / 2**n)


def beta_ppf(q: float, a: float, b: float) -> float:
    """The quantile of the Beta(a, b) distribution: Newton's steps on ``beta_inc`` (its derivative is
    the density), kept inside a shrinking bracket so a step that overshoots falls back to bisection.
    Converges in a handful of steps where bisection alone takes fifty; checked against scipy."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"need 0 < q < 1, got {q}")
    low, high = 0.0, 1.0
    x = a / (a + b)
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    for _ in range(100):
        error = beta_inc(a, b, x) - q
        if error > 0:
            high = x
        else:
            low = x
        density = math.exp(log_norm + (a - 1) * math.log(x) + (b - 1) * math.log1p(-x))
        step = x - error / density if density > 0 else -1.0
        x_next = step if low < step < high else (low + high) / 2
        if abs(x_next - x) <= 1e-12 * x or high - low < 1e-15:  # Newton: the next step is ~1e-24
            return x_next
        x = x_next
    return x
