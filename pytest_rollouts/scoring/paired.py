"""A paired comparison of two runs on the same tasks: is the candidate better, worse, or no different?

Comparing two means with their own intervals wastes most of the information: the same tasks are
easy or hard for both runs, so the per-task differences vary far less than either run's rewards.
Following Miller 2024 ("Adding Error Bars to Evals", section 4), the difference is the mean of
the per-task differences d_i = candidate_i - baseline_i (each a task's mean over its scored
rollouts), its standard error sd(d) / sqrt(n), and its interval Student's t with n - 1 df.

A p-value comes beside it: McNemar's exact test when every reward is 0 or 1 (tasks as the unit, a
task solved when at least half its scored rollouts are; with one rollout per task this is the
textbook test), otherwise a seeded paired bootstrap over tasks. Manski's bounds on the
difference say how far the unknown rollouts (failed, missing) could move it. Pure functions:
paired tasks in, a ``Comparison`` out (pairing the files is ``pairing.py``'s job).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import field

from pytest_rollouts.datatype import datatype
from pytest_rollouts.scoring.distributions import binomial_two_sided_half
from pytest_rollouts.scoring.intervals import LEVEL, UNIT_RANGE, Interval, RewardRange, is_binary, t_interval
from pytest_rollouts.scoring.stats import nan_mean

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240


@datatype(frozen=True)
class TaskRewards:
    """One task in one run: its name in the report and the rewards of its scored rollouts.

    ``expected``: the rollouts it was meant to have (masked ones left out, as the agent asked), so
    ``expected - len(rewards)`` rollouts are unknown: failed, without a reward, or never written.
    """

    label: str
    rewards: tuple[float, ...]
    expected: int

    @property
    def mean(self) -> float | None:
        return nan_mean(self.rewards) if self.rewards else None

    @property
    def unknown(self) -> int:
        return max(0, self.expected - len(self.rewards))

    def bounds(self, reward_range: RewardRange) -> tuple[float, float]:
        """Manski's bounds on this task's mean over its expected rollouts."""
        if max(self.expected, len(self.rewards)) == 0:  # every rollout masked: nothing known either way
            return reward_range.low, reward_range.high
        if not self.rewards:
            return reward_range.low, reward_range.high
        # The scored mean and the floor (ceiling) weighted by their rollouts: weights, not sums over
        # a count (rewards near the float limit overflow a sum), and no padded copy of the rewards.
        known = len(self.rewards) / (len(self.rewards) + self.unknown)
        mean = nan_mean(self.rewards)
        return (
            mean * known + reward_range.low * (1 - known),
            mean * known + reward_range.high * (1 - known),
        )


@datatype(frozen=True)
class Flip:
    """A task whose mean reward changed: ``fixed`` when the candidate does better."""

    label: str
    baseline: float
    candidate: float

    @property
    def difference(self) -> float:
        return self.candidate - self.baseline


@datatype(frozen=True)
class Test:
    """The p-value of "no difference", and how it was found."""

    method: str  # "mcnemar" or "bootstrap"
    p_value: float
    # McNemar: tasks solved only by the candidate, only by the baseline. Bootstrap: none.
    discordant: tuple[int, int] | None = None
    # Bootstrap: its percentile interval of the difference, beside the t interval.
    interval: Interval | None = None


# Why a comparison has no difference (and no means): written beside the nulls, so a reader of
# ``--json`` learns why rather than meeting a NaN, which is no JSON.
NO_TASK_SCORED_IN_BOTH = "no task scored in both runs"


@datatype(frozen=True)
class Comparison:
    """candidate - baseline for one group, over the tasks both runs scored (means None without one)."""

    group: str
    tasks: int
    baseline_mean: float | None
    candidate_mean: float | None
    se: float | None
    interval: Interval | None
    test: Test | None
    # None when a reward falls outside the range (``outside`` says which): then they bound nothing.
    manski: tuple[float, float] | None
    # Paired tasks one run never scored at all: no difference to take, only Manski's bounds.
    unscored: int = 0
    flips: tuple[Flip, ...] = field(default=())
    outside: tuple[float, float] | None = None
    # Paired tasks with a rollout without a score in either run (failed, no reward, no row).
    incomplete: int = 0
    # The paired interval of the differences with every such rollout at its worst for the candidate
    # (its own at the range's floor, the baseline's at the ceiling): Manski's lower bound of the
    # difference with its sampling error. What the regression gate judges while rollouts lack a
    # score; None with rewards outside the range (no bounds) or fewer than two paired tasks.
    pessimistic: Interval | None = None

    @property
    def paired(self) -> int:
        """The tasks both runs have, scored in both or not."""
        return self.tasks + self.unscored

    @property
    def difference(self) -> float | None:
        if self.baseline_mean is None or self.candidate_mean is None:
            return None
        return self.candidate_mean - self.baseline_mean

    def as_dict(self) -> dict[str, object]:
        """The comparison under the keys docs/statistics.md names."""
        return {
            "group": self.group,
            "num_tasks": self.tasks,
            "num_tasks_unscored": self.unscored,
            "baseline_mean/reward": self.baseline_mean,
            "candidate_mean/reward": self.candidate_mean,
            "difference/reward": self.difference,
            **({} if self.tasks else {"no_difference": NO_TASK_SCORED_IN_BOTH}),
            "se_paired/reward": self.se,
            "ci_95/difference": None if self.interval is None else self.interval.as_list(),
            "ci_method": None if self.interval is None else self.interval.method,
            "test": None if self.test is None else self.test.method,
            "p_value": None if self.test is None else self.test.p_value,
            "discordant_fixed_broke": None
            if self.test is None or self.test.discordant is None
            else list(self.test.discordant),
            "bootstrap_ci_95/difference": None
            if self.test is None or self.test.interval is None
            else self.test.interval.as_list(),
            "manski_bounds/difference": None if self.manski is None else list(self.manski),
            "num_tasks_incomplete": self.incomplete,
            "pessimistic_ci_95/difference": None if self.pessimistic is None else self.pessimistic.as_list(),
            **({} if self.outside is None else {"rewards_outside_range": list(self.outside)}),
            "fixed": [[f.label, f.baseline, f.candidate] for f in self.flips if f.difference > 0],
            "broke": [[f.label, f.baseline, f.candidate] for f in self.flips if f.difference < 0],
        }


def compare(
    group: str,
    pairs: Sequence[tuple[TaskRewards, TaskRewards]],
    reward_range: RewardRange = UNIT_RANGE,
    seed: int = BOOTSTRAP_SEED,
) -> Comparison:
    """The paired comparison of (baseline, candidate) tasks; ``pairs`` must not be empty."""
    if not pairs:
        raise ValueError("no paired tasks to compare")
    # (label, baseline mean, candidate mean) of the tasks both runs scored.
    means = [(b.label, mb, mc) for b, c in pairs if (mb := b.mean) is not None and (mc := c.mean) is not None]
    diffs = [mc - mb for _, mb, mc in means]
    n = len(diffs)
    se, interval = _paired_interval(diffs)
    test = None
    if n:
        rewards = [r for b, c in pairs if b.rewards and c.rewards for r in (*b.rewards, *c.rewards)]
        binary = is_binary(rewards)
        test = _mcnemar(means) if binary else _bootstrap(diffs, random.Random(seed))
    flips = sorted((Flip(*m) for m in means if m[1] != m[2]), key=lambda f: (-abs(f.difference), f.label))
    outside = reward_range.outside(task.rewards for pair in pairs for task in pair)
    worst, best = _extremes(pairs, reward_range)
    return Comparison(
        group,
        n,
        nan_mean([mb for _, mb, _ in means]) if n else None,
        nan_mean([mc for _, _, mc in means]) if n else None,
        se,
        interval,
        test,
        None if outside else (nan_mean(worst), nan_mean(best)),
        unscored=len(pairs) - n,
        flips=tuple(flips),
        outside=outside,
        incomplete=sum(1 for b, c in pairs if b.unknown or c.unknown),
        pessimistic=None if outside else _paired_interval(worst)[1],
    )


def _paired_interval(diffs: Sequence[float]) -> tuple[float | None, Interval | None]:
    """The standard error of the mean of per-task differences, sd(d) / sqrt(n), and the t interval
    around it with n - 1 df (Miller 2024, section 4); both None with fewer than two tasks, or a
    difference past the float range (rewards near 1e308 of both signs)."""
    n = len(diffs)
    if n < 2 or not all(math.isfinite(d) for d in diffs):
        return None, None
    se = statistics.stdev(diffs) / math.sqrt(n)
    return se, t_interval(nan_mean(diffs), se, n - 1)


def _mcnemar(means: Sequence[tuple[str, float, float]]) -> Test:
    """McNemar's exact test on tasks: of the tasks exactly one run solved (a task is solved when at
    least half its scored rollouts are), is the split between the runs 50:50? Binomial, p = 1/2."""
    fixed = sum(1 for _, b, c in means if c >= 0.5 > b)
    broke = sum(1 for _, b, c in means if b >= 0.5 > c)
    return Test("mcnemar", binomial_two_sided_half(fixed, fixed + broke), (fixed, broke))


def _bootstrap(diffs: Sequence[float], rng: random.Random) -> Test:
    """The paired bootstrap over tasks (Efron and Tibshirani 1993, ch. 16): resample the per-task
    differences with replacement, seeded so a rerun prints the same numbers. The p-value is twice
    the smaller share of resampled means on either side of 0; the interval their 2.5 and 97.5
    percentiles."""
    n = len(diffs)
    means = sorted(nan_mean(rng.choices(diffs, k=n)) for _ in range(BOOTSTRAP_RESAMPLES))
    below = sum(1 for m in means if m <= 0) / len(means)
    above = sum(1 for m in means if m >= 0) / len(means)
    cuts = statistics.quantiles(means, n=round(2 / (1 - LEVEL)), method="inclusive")  # every 2.5% at 95%
    low, high = cuts[0], cuts[-1]
    return Test("bootstrap", min(1.0, 2 * min(below, above)), interval=Interval(low, high, "bootstrap"))


def _extremes(
    pairs: Sequence[tuple[TaskRewards, TaskRewards]], reward_range: RewardRange
) -> tuple[list[float], list[float]]:
    """Each paired task's difference over its expected rollouts with the unknown ones at the range's
    floor and ceiling: the candidate at its worst against the baseline at its best, then the other
    way round. Their means are Manski's bounds of the difference of the task-weighted means."""
    worst, best = [], []
    for base, cand in pairs:
        (base_low, base_high), (cand_low, cand_high) = base.bounds(reward_range), cand.bounds(reward_range)
        worst.append(cand_low - base_high)
        best.append(cand_high - base_low)
    return worst, best
