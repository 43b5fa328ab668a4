"""Intervals beside a mean reward: small-sample confidence intervals and Manski's bounds for the missing.

The normal interval NeMo Gym reports (mean +/- 1.96 se) is too narrow on a few dozen tasks, and it
runs past [0, 1] for a pass rate near 0 or 1. Here a binary reward on fewer than
``SMALL_SAMPLE_TASKS`` tasks gets an exact interval (``small_sample.py``), on more the Wilson score
interval (one rollout per task); anything else Student's t with (tasks - 1) degrees of freedom on
the task-clustered standard error (Miller 2024, "Adding Error Bars to Evals").

Neither says anything about rollouts that never produced a reward. Manski's bounds do: score every
one of them at the floor, then at the ceiling, of the reward range, and the true mean over the whole
materialized input lies between the two whatever the failures hid (Manski 1989, "Anatomy of the
Selection Problem"). See docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pytest_rollouts.datatype import datatype
from pytest_rollouts.scoring.distributions import normal_ppf, t_ppf
from pytest_rollouts.scoring.small_sample import (
    EXACT,
    EXACT_CLUSTERED,
    SMALL_SAMPLE_TASKS,
    clopper_pearson,
    effective_size,
)
from pytest_rollouts.scoring.stats import Flattened, clustered_sem, nan_mean

LEVEL = 0.95


@datatype
class Interval:
    """A two-sided interval and how it was made (``exact``, ``exact-clustered``, ``wilson`` or ``t``)."""

    low: float
    high: float
    method: str

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def wilson(successes: int, n: int, level: float = LEVEL) -> Interval:
    """Wilson's score interval for a proportion (Wilson 1927): never outside [0, 1], and near its
    nominal coverage down to a handful of trials, where p +/- z se is not."""
    if n <= 0:
        raise ValueError("need at least one trial")
    z = normal_ppf(0.5 + level / 2.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # At 0 or n successes the bound is exactly 0 or 1; the formula leaves a rounding error there.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(low, high, "wilson")


def t_interval(mean: float, se: float, df: int, level: float = LEVEL) -> Interval:
    """mean +/- t(df) se: the small-sample interval of a mean over ``df + 1`` independent clusters."""
    half = t_ppf(0.5 + level / 2.0, df) * se
    return Interval(mean - half, mean + half, "t")


def is_binary(rewards: Sequence[float]) -> bool:
    """Every reward is 0 or 1: pass/fail, where a proportion's interval and McNemar's test apply."""
    return all(r == 0.0 or r == 1.0 for r in rewards)


def mean_interval(rewards_by_task: Sequence[Sequence[float]], level: float = LEVEL) -> Interval | None:
    """The confidence interval of the mean reward over these tasks' scored rollouts.

    Binary rewards on fewer than ``SMALL_SAMPLE_TASKS`` tasks: Clopper-Pearson's exact interval, on
    Korn and Graubard's effective size when tasks have repeats. More tasks: Wilson when the rewards
    are binary with one rollout per task (independent trials); otherwise t with (tasks - 1) df on the
    task-clustered standard error, as repeats of one task are correlated. None with fewer than two
    tasks (no spread between tasks to measure; one rollout is enough for the exact and Wilson
    intervals) or an infinite reward.
    """
    tasks = [ys for ys in rewards_by_task if ys]
    flat = Flattened(tasks)
    if not tasks:
        return None
    binary, single = is_binary(flat), all(len(ys) == 1 for ys in tasks)
    if binary and len(tasks) < SMALL_SAMPLE_TASKS:
        if single:
            return Interval(*clopper_pearson(sum(flat), len(flat), level), EXACT)
        se = clustered_sem(tasks)
        if se is None:  # one task: its repeats say nothing of how tasks differ
            return None
        size = effective_size(tasks, se, level)
        return Interval(*clopper_pearson(nan_mean(flat) * size, size, level), EXACT_CLUSTERED)
    if binary and single:
        return wilson(int(sum(flat)), len(flat), level)
    se = clustered_sem(tasks)
    if se is None or not math.isfinite(se):
        return None
    return t_interval(nan_mean(flat), se, len(tasks) - 1, level)


@datatype(frozen=True)
class RewardRange:
    """The rewards an agent can give: Manski's bounds score an unknown rollout at ``low`` and ``high``."""

    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError(f"a reward range is two finite numbers, got {self.low:g},{self.high:g}")
        if self.low >= self.high:
            raise ValueError(f"a reward range needs LO < HI, got {self.low:g},{self.high:g}")

    def __str__(self) -> str:
        return f"{self.low:g},{self.high:g}"

    def outside(self, groups: Iterable[Sequence[float]]) -> tuple[float, float] | None:
        """The lowest and highest reward when any falls outside the range, else None. Then scoring
        the unknown rollouts at the floor and the ceiling bounds nothing (an upper bound can fall
        under the scored mean), so there are no Manski bounds: one rule for a run and a comparison.
        ``groups``: the rewards task by task, each group's extremes taken in place (no list of all)."""
        lowest, highest = math.inf, -math.inf
        for rewards in groups:
            if rewards:
                lowest, highest = min(lowest, *rewards), max(highest, *rewards)
        if lowest < self.low or highest > self.high:
            return lowest, highest
        return None

    @classmethod
    def parse(cls, text: str) -> RewardRange:
        """``LO,HI`` as options give it; ``ValueError`` in words otherwise."""
        # Here, not at the top: the reporter imports this module in every session, pydantic with config.
        from pytest_rollouts.config.values import finite_number

        parts = text.split(",")
        try:
            low, high = (finite_number(part.strip()) for part in parts)
        except ValueError as exc:
            why = f": {exc}" if len(parts) == 2 else ""
            raise ValueError(f"a reward range is LO,HI (two finite numbers), got {text!r}{why}") from None
        return cls(low, high)


# NeMo Gym's rewards: 0 (fail) to 1 (pass).
UNIT_RANGE = RewardRange()


def outside_words(seen: Sequence[float], low: float, high: float) -> str:
    """What a line says in place of Manski's bounds when rewards fall outside the range."""
    return f"rewards from {seen[0]:g} to {seen[1]:g} fall outside the reward range {low:g},{high:g}"


def manski_bounds(mean: float, scored: int, unknown: int, reward_range: RewardRange) -> tuple[float, float]:
    """The mean over all ``scored + unknown`` rollouts with each unknown one at the floor, then the
    ceiling, of the range: the narrowest bounds that assume nothing about why rollouts went missing."""
    total = scored + unknown
    if total == 0:
        raise ValueError("no rollouts to bound")
    known = mean * scored if scored else 0.0
    return (known + reward_range.low * unknown) / total, (known + reward_range.high * unknown) / total
