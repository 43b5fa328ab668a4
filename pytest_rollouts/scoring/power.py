"""How small a difference an eval of this size can see, and how big an eval would see a given one.

An eval too small to detect the change it is meant to gate passes every regression below its noise.
From one run's rewards: the between-task variance (how much tasks differ in true difficulty) and
the within-task variance (how much repeats of one task differ). A paired comparison of two runs on
the same n tasks with k repeats each has per-task differences of variance

    var(d) = 2 (1 - rho) sigma_b^2 + 2 sigma_w^2 / k

(both runs' variances taken equal; rho the correlation of the two models' true task scores, which
pairing exploits), and detects at two-sided level alpha with power 1 - beta a difference of

    MDE = (z_{1-alpha/2} + z_{1-beta}) sqrt(var(d) / n)

(Miller 2024, "Adding Error Bars to Evals", section 5). Repeats shrink only the within-task term;
more tasks shrink both. See docs/statistics.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pytest_rollouts.datatype import datatype
from pytest_rollouts.scoring.distributions import normal_ppf
from pytest_rollouts.scoring.stats import nan_mean, std_dev

ALPHA = 0.05
POWER = 0.8
CORRELATION = 0.5
REPEAT_CHOICES = (1, 2, 4, 8, 16)


@datatype
class Variance:
    """One run's variance components, over the tasks with a score."""

    tasks: int
    repeats: float  # scored rollouts per task, on average
    between: float  # sigma_b^2: the variance of the tasks' true mean rewards
    # sigma_w^2: the pooled variance of repeats within a task; None with one rollout per task
    # (then the spread cannot be split, and ``between`` holds all of it).
    within: float | None

    def difference_variance(self, repeats: float, correlation: float = CORRELATION) -> float:
        """var(d) of a paired comparison with ``repeats`` rollouts per task in both runs."""
        within = 0.0 if self.within is None else 2 * self.within / repeats
        return 2 * (1 - correlation) * self.between + within


def variance_components(rewards_by_task: Sequence[Sequence[float]]) -> Variance:
    """Method-of-moments components (one-way random effects): the pooled within-task variance, and
    the variance of the task means less the part their own sampling explains, at least 0."""
    tasks = [ys for ys in rewards_by_task if ys]
    if len(tasks) < 2:
        raise ValueError("need at least two tasks with a score to measure how tasks differ")
    means = [nan_mean(ys) for ys in tasks]
    repeats = statistics.fmean(len(ys) for ys in tasks)
    dof = sum(len(ys) - 1 for ys in tasks)
    try:
        within = math.fsum((y - m) ** 2 for ys, m in zip(tasks, means, strict=True) for y in ys) / dof if dof else None
        # The stdlib's variance is exact (fractions), seconds at 100k tasks; ``std_dev`` agrees to a few ulps.
        deviation = std_dev(means, nan_mean(means), ddof=1)
        spread = statistics.variance(means) if deviation is None else deviation**2
    except OverflowError:  # rewards near the float limit: their squares are past it
        raise ValueError("the rewards' variance is too large for a float; nothing to size") from None
    between = max(0.0, spread - (within or 0.0) / repeats)
    return Variance(len(tasks), repeats, between, within)


def _z(alpha: float, power: float) -> float:
    return normal_ppf(1 - alpha / 2) + normal_ppf(power)


def minimum_detectable(
    variance: Variance,
    tasks: int | None = None,
    repeats: float | None = None,
    correlation: float = CORRELATION,
    alpha: float = ALPHA,
    power: float = POWER,
) -> float:
    """The smallest true difference a paired comparison on ``tasks`` tasks with ``repeats`` repeats
    (by default this run's) detects with the given power at the given level."""
    n = variance.tasks if tasks is None else tasks
    k = variance.repeats if repeats is None else repeats
    return _z(alpha, power) * math.sqrt(variance.difference_variance(k, correlation) / n)


def tasks_needed(
    variance: Variance,
    delta: float,
    repeats: float,
    correlation: float = CORRELATION,
    alpha: float = ALPHA,
    power: float = POWER,
) -> int:
    """How many tasks a paired comparison with ``repeats`` repeats needs to detect ``delta``."""
    if delta <= 0:
        raise ValueError("the difference to detect must be positive")
    try:
        return max(2, math.ceil((_z(alpha, power) / delta) ** 2 * variance.difference_variance(repeats, correlation)))
    except OverflowError:  # a delta near 0 (1e-300): a count past any float
        raise ValueError(f"detecting {delta:g} needs more tasks than a float can count") from None
