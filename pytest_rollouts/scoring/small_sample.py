"""Intervals for a pass rate on few tasks that keep their coverage: exact, and exact over clustered repeats.

A pass rate over 40 tasks from the normal approximation (p +/- 1.96 se) covers the truth well under
95% of the time near 0 or 1 (Bowyer et al. 2025, "Position: Don't use the CLT in LLM evals with
fewer than a few hundred datapoints"). Below ``SMALL_SAMPLE_TASKS`` tasks a binary reward gets:

- with one rollout per task, the exact interval of Clopper and Pearson (1934, "The use of confidence
  or fiducial limits illustrated in the case of the binomial"): the Beta quantiles that invert the
  binomial test, never below its nominal coverage whatever the pass rate;
- with repeats, the same interval on the effective sample size of Korn and Graubard (1998,
  "Confidence intervals for proportions with small expected number of positive counts estimated
  from survey data"): repeats of a task are correlated (a beta-binomial: each task its own pass
  rate), so N rollouts weigh as N / deff, deff = 1 + (k - 1) rho the design effect, measured as
  p(1 - p) / N over the task-clustered variance, and shrunk further by (z / t_df)^2 for the
  variance's own uncertainty, df Satterthwaite's (1946) effective number of tasks that carry it;
  never below the exact interval on the G task means (``effective_size``).

Both are checked by simulation in ``tests/scoring/test_small_sample.py`` (and the exact one against
scipy's ``binomtest(...).proportion_ci("exact")``). See docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_rollouts.scoring.distributions import beta_ppf, normal_ppf, t_ppf

# Below this many tasks a binary reward's interval is exact (or exact-clustered); at and above it
# Wilson's (or t on the clustered se), whose approximation has settled by then.
SMALL_SAMPLE_TASKS = 200
EXACT = "exact"
EXACT_CLUSTERED = "exact-clustered"


def clopper_pearson(successes: float, n: float, level: float) -> tuple[float, float]:
    """The exact interval of ``successes`` in ``n`` trials; either may be fractional (an effective
    count), the Beta quantiles take them as they are."""
    if n <= 0:
        raise ValueError("need at least one trial")
    alpha = 1 - level
    low = 0.0 if successes <= 0 else beta_ppf(alpha / 2, successes, n - successes + 1)
    high = 1.0 if successes >= n else beta_ppf(1 - alpha / 2, successes + 1, n - successes)
    return low, high


def effective_size(rewards_by_task: Sequence[Sequence[float]], clustered_se: float, level: float) -> float:
    """Korn and Graubard's effective number of trials, made safe on few informative tasks.

    N / deff (deff at least 1, so never more than the rollouts), times (z / t_df)^2 for the
    variance's own uncertainty. Korn and Graubard take df = G - 1; but at a low pass rate only the
    few tasks that pass at all carry the variance, and on 20-40 tasks the interval then covered
    85-93% (seeded simulation). So df is Satterthwaite's effective count of the task residuals
    e_i = sum_j (y_ij - p), (sum e_i^2)^2 / sum e_i^4, at most G - 1. And the size is never below
    N^2 / sum n_i^2 (G with k repeats each) times (z / t_{G-1})^2: the size when repeats agree
    perfectly (rho = 1, the tasks are the trials), the most any design effect can take away; it is
    also the size when every rollout agrees (no variance to measure the design effect with)."""
    n = sum(map(len, rewards_by_task))
    p = math.fsum(math.fsum(ys) for ys in rewards_by_task) / n
    tasks = len(rewards_by_task)  # two at least: the clustered se needs them
    quantile = 0.5 + level / 2
    z = normal_ppf(quantile)
    floor = n * n / sum(len(ys) ** 2 for ys in rewards_by_task) * (z / t_ppf(quantile, tasks - 1)) ** 2
    if clustered_se <= 0 or p in (0.0, 1.0):
        return floor
    residuals = [math.fsum(y - p for y in ys) ** 2 for ys in rewards_by_task]
    df = min(tasks - 1.0, max(1.0, math.fsum(residuals) ** 2 / math.fsum(r * r for r in residuals)))
    size = min(float(n), p * (1 - p) / clustered_se**2) * (z / t_ppf(quantile, math.floor(df * 10) / 10)) ** 2
    return max(floor, size)
