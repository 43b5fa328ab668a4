"""The statistics every default metric is made of: mean, median, spreads, standard errors, intervals.

They follow NeMo Gym's pandas: an infinity among the values is a value like any other, and a
statistic that is undefined (a spread of one value, an infinity's spread, infinities of both
signs) is ``None`` rather than a number that would lie. An infinite result is a ``NonFinite``
(the metrics file, strict JSON, writes it as ``null``).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import operator
import statistics
from array import array
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

from pytest_rollouts.store.jsonl import NonFinite

# Past this many values, a median and a spread are taken over runs of them (``median``, ``std_dev``).
RUN = 1 << 16
# Two-sided 95% normal quantile, as NeMo Gym uses for its intervals.
Z_95 = 1.96


class Flattened(Collection[float]):
    """The values of several groups (a run's rewards, task by task) as one collection, iterated in
    place: at a million rollouts a list of them all is 8 MB more, made again by each statistic."""

    __slots__ = ("groups",)

    def __init__(self, groups: Sequence[Sequence[float]]) -> None:
        self.groups = groups

    def __iter__(self) -> Iterator[float]:
        return itertools.chain.from_iterable(self.groups)

    def __len__(self) -> int:
        return sum(map(len, self.groups))

    def __contains__(self, value: object) -> bool:
        return any(value in group for group in self.groups)


def nan_mean(xs: Iterable[float]) -> float:
    """The mean, NaN when it is undefined: infinities of both signs (pandas' answer, where
    ``statistics.fmean`` raises). Rewards near the float limit (1e308) overflow their sum but not
    their mean, which is then taken over the values divided first (an agent's reply chose them:
    scoring ended in an OverflowError). A collection (a ``Flattened`` one too) is read twice at
    most, never copied; only a one-pass iterable is listed, for that second reading."""
    values = xs if isinstance(xs, Collection) else list(xs)
    if len(values) == 1:  # a task of one rollout (each task's mean is asked for): its value as fmean
        (x,) = values  # gives it, a plain float and -0.0 made 0.0 (fsum's sum starts at 0.0)
        return float(x) + 0.0
    try:
        return statistics.fmean(values)
    except ValueError:
        return math.nan
    except OverflowError:
        return math.fsum(x / len(values) for x in values)


def written(x: float) -> float | None:
    """A statistic as it is written: None when undefined (NaN: infinities of both signs, or an
    infinity's spread), an infinity as a ``NonFinite``."""
    if math.isfinite(x):
        return x
    return None if math.isnan(x) else NonFinite(x)


def std_dev(xs: Sequence[float], mean: float | None, ddof: int) -> float | None:
    """What statistics.pstdev (ddof=0) or stdev (ddof=1) give; None when undefined (n <= ddof, or
    an infinity among ``xs``, as pandas' NaN).

    The stdlib computes in exact fractions, about 30 us a call: seconds for 100k one-rollout
    tasks. The norm of the deviations (hypot accumulates in extended precision and cannot
    overflow) agrees with it to a few ulps at a fraction of the cost.
    """
    if len(xs) <= ddof or mean is None or not math.isfinite(mean):
        return None
    if len(xs) <= RUN:
        return math.hypot(*_deviations(xs, mean)) / math.sqrt(len(xs) - ddof)
    # hypot of each run's hypot: the norm of them all, never a tuple of a million deviations.
    runs = (math.hypot(*_deviations(xs[i : i + RUN], mean)) for i in range(0, len(xs), RUN))
    return math.hypot(*runs) / math.sqrt(len(xs) - ddof)


def _deviations(xs: Iterable[float], mean: float) -> Iterator[float]:
    """Each ``x - mean``, the loop in C (a generator's is the most of a small task's spread)."""
    return map(operator.sub, xs, itertools.repeat(mean))


def median(xs: Sequence[float]) -> float:
    """``statistics.median``, past ``RUN`` values read off ``ranked`` (never one list of them all)."""
    if len(xs) <= RUN:
        return statistics.median(xs)
    middle, odd = divmod(len(xs), 2)
    at = ranked(xs, {middle - 1, middle})
    return at[middle] if odd else (at[middle - 1] + at[middle]) / 2


def ranked(xs: Sequence[float], ranks: Collection[int]) -> dict[int, float]:
    """The values at ``ranks`` (0-based) of ``xs`` sorted. A million values sorted at once are a list
    of float objects (32 MB); here runs of ``RUN`` are sorted and kept as arrays, then merged."""
    runs = [array("d", sorted(xs[i : i + RUN])) for i in range(0, len(xs), RUN)]
    wanted, last = set(ranks), max(ranks)
    found = {}
    for at, x in enumerate(heapq.merge(*runs)):
        if at in wanted:
            found[at] = x
            if at == last:
                break
    return found


# A field's five summary names: ``mean/``, ``median/``, ``std/``, ``min/`` and ``max/`` it.
SummaryNames = tuple[str, str, str, str, str]


@functools.cache
def summary_names(field: str) -> SummaryNames:
    """One set of key strings per field, shared by every task's entry (100k tasks, 100k dicts)."""
    return f"mean/{field}", f"median/{field}", f"std/{field}", f"min/{field}", f"max/{field}"


def field_summary(field: str, xs: Sequence[float]) -> dict[str, float | None]:
    """``mean/``, ``median/``, ``std/``, ``min/`` and ``max/`` of one field's values, as NeMo Gym names them."""
    # Population std (ddof=0), as NeMo Gym reports it: it describes these rollouts, and is 0.0,
    # not undefined, for a single one. Inferential spreads (se, sem) use the sample std (ddof=1).
    names = summary_names(field)
    if len(xs) == 1:  # one rollout per task is common: skip the general path
        (x,) = xs
        out: dict[str, float | None] = {}
        add_one_value_summary(out, names, x)
        return out
    mean_, median_, std_, min_, max_ = names
    mean = nan_mean(xs)
    if not math.isfinite(mean):  # an infinity among them: the rare path
        middle = written(median(xs))
        return {mean_: written(mean), median_: middle, std_: None, min_: min(xs), max_: max(xs)}
    return {mean_: mean, median_: median(xs), std_: std_dev(xs, mean, ddof=0), min_: min(xs), max_: max(xs)}


def add_one_value_summary(entry: dict[str, Any], names: SummaryNames, x: float) -> None:
    """``field_summary`` of the one value ``x`` (of the field ``names`` are of, ``summary_names``),
    written into ``entry``: a task of one rollout, the common case, and 100k tasks make a dict of
    five per task and its copy a hot loop."""
    mean_, median_, std_, min_, max_ = names
    entry[mean_] = x
    entry[median_] = x
    entry[std_] = 0.0
    entry[min_] = x
    entry[max_] = x


def interval(mean: float, se: float | None) -> tuple[float | None, float | None]:
    """Normal-approximation 95% interval; undefined without a standard error."""
    return (None, None) if se is None else (mean - Z_95 * se, mean + Z_95 * se)


def across_repeats(field: str, repeat_means: Sequence[float]) -> dict[str, float | None]:
    """How much the headline mean moves between repeats of the whole run: its run-to-run noise."""
    mean = nan_mean(repeat_means)
    std = std_dev(repeat_means, mean, ddof=1)
    se = None if std is None else std / math.sqrt(len(repeat_means))
    low, high = interval(mean, se)
    name = f"across_repeats/mean/{field}"
    return {
        f"mean_{name}": written(mean),
        f"median_{name}": written(statistics.median(repeat_means)),
        f"std_{name}": std,
        f"min_{name}": written(min(repeat_means)),
        f"max_{name}": written(max(repeat_means)),
        f"se_{name}": se,
        f"ci_low_95_{name}": low,
        f"ci_high_95_{name}": high,
    }


def clustered_sem(rewards_by_task: Sequence[Sequence[float]]) -> float | None:
    """Standard error of the mean reward with tasks as clusters.

    Repeats of one task are correlated (an easy task passes every time), so treating all rows as
    independent understates the error. This is the cluster-robust (sandwich) variance of a mean
    with the G/(G-1) small-sample correction; with one rollout per task it equals the plain
    ``stdev/sqrt(N)``. With fewer than two tasks the between-task spread is unknowable: None.
    """
    g = len(rewards_by_task)
    if g < 2:
        return None
    n = sum(map(len, rewards_by_task))
    mean = nan_mean(Flattened(rewards_by_task))
    if not math.isfinite(mean):  # an infinite reward: no finite spread
        return None
    try:
        residual_sums = [math.fsum(y - mean for y in ys) for ys in rewards_by_task]
        return math.sqrt(g / (g - 1) * math.fsum(s * s for s in residual_sums)) / n
    except OverflowError:  # rewards near the float limit: a spread past it, none to write
        return None
