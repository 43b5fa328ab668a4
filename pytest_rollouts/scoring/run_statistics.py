"""Each group's ``statistics`` entry in the metrics file: the interval and Manski's bounds beside its mean.

Computed from the run's own rows (the metric input: real rewards and the policies' zeros), whoever
computed the metrics, so the interval and bounds a gate uses are the plugin's, never a server's
unchecked numbers. With ``--rollouts-group-by FIELD`` the same numbers come per value of that row
field and per dataset file. Keys are documented in docs/statistics.md.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.resume import key_of
from pytest_rollouts.scoring.intervals import UNIT_RANGE, RewardRange, manski_bounds, mean_interval
from pytest_rollouts.scoring.metrics_shape import STATISTICS
from pytest_rollouts.scoring.stats import Flattened, nan_mean, written
from pytest_rollouts.store.artifacts import read_rows

if TYPE_CHECKING:
    from pytest_rollouts.rows.manifest import RunManifest
    from pytest_rollouts.scoring.accounting import Coverage
    from pytest_rollouts.scoring.aggregate import RunScore


@datatype(frozen=True)
class StatisticsOptions:
    """What the statistics are asked for: ``--rollouts-reward-range``, ``--rollouts-pass-k``,
    ``--rollouts-group-by``."""

    reward_range: RewardRange = UNIT_RANGE
    pass_ks: tuple[int, ...] | None = None
    group_by: str | None = None


DEFAULT_STATISTICS = StatisticsOptions()


def statistics_entry(
    rewards_by_task: Mapping[int, Sequence[float]],
    unknown_by_task: Mapping[int, int],
    reward_range: RewardRange,
) -> dict[str, Any]:
    """The interval of the mean reward and Manski's bounds over these tasks (``unknown_by_task``:
    rollouts without a score in the mean, neither masked nor counted as zero)."""
    tasks = [ys for ys in rewards_by_task.values() if ys]
    scored = sum(map(len, tasks))
    unknown = sum(unknown_by_task.values())
    interval = mean_interval(tasks)
    # An infinite reward (a value, as NeMo Gym takes it) leaves an infinite or undefined mean: no bounds.
    mean = nan_mean(Flattened(tasks)) if scored else 0.0
    finite = math.isfinite(mean)
    # A reward outside the range: no bounds, and the range seen is said instead.
    outside = reward_range.outside(tasks)
    fits = finite and scored + unknown and outside is None
    bounds = manski_bounds(mean, scored, unknown, reward_range) if fits else None
    return {
        "num_tasks": len(tasks),
        "num_rollouts_scored": scored,
        "num_rollouts_unknown": unknown,
        "mean/reward": written(mean) if scored else None,
        # Clipped to the reward range, where every reward lies: t on two tasks reached [-5.85, 6.85].
        "ci_95/reward": None if interval is None else _within(interval.as_list(), reward_range, outside is not None),
        "ci_method": None if interval is None else interval.method,
        "manski_bounds/reward": None if bounds is None else list(bounds),
        **({"rewards_outside_range": list(outside)} if outside else {}),
    }


def _within(bounds: list[float], reward_range: RewardRange, outside: bool) -> list[float]:
    if outside:
        return bounds
    return [max(bounds[0], reward_range.low), min(bounds[1], reward_range.high)]


@datatype
class TaskLabels:
    """Where each task comes from, for the breakdowns: its dataset file (by the manifest's task
    ranges) and, with ``--rollouts-group-by``, its value of that row field."""

    datasets: tuple[tuple[int, int, str], ...] = ()
    group_by: str | None = None
    values: Mapping[int, str] = field(default_factory=dict)

    def dataset(self, task: int) -> str:
        for first, end, path in self.datasets:
            if first <= task < end:
                return path
        return "(unknown)"


def group_statistics(
    rewards_by_task: Mapping[int, Sequence[float]],
    unknown_by_task: Mapping[int, int],
    options: StatisticsOptions,
    labels: TaskLabels | None = None,
) -> dict[str, Any]:
    """One group's entry; with ``labels`` also split by dataset file (when the manifest names
    them) and by the ``--rollouts-group-by`` field."""
    entry: dict[str, Any] = {"reward_range": [options.reward_range.low, options.reward_range.high]}
    whole = statistics_entry(rewards_by_task, unknown_by_task, options.reward_range)
    entry.update(whole)
    entry["minimum_detectable_difference"] = _detectable(rewards_by_task)
    if labels is None:
        return entry
    splits: list[tuple[str, Callable[[int], str]]] = []
    if labels.datasets:
        splits.append(("by_dataset", labels.dataset))
    if labels.group_by is not None:
        splits.append(("by_field", lambda task: labels.values.get(task, "(none)")))
        entry["group_by"] = labels.group_by
    for name, label in splits:
        split: defaultdict[str, list[int]] = defaultdict(list)
        for task in rewards_by_task.keys() | unknown_by_task.keys():
            split[label(task)].append(task)
        entry[name] = {
            value: _part(tasks, rewards_by_task, unknown_by_task, options, whole if len(split) == 1 else None)
            for value, tasks in sorted(split.items())
        }
    return entry


def _part(
    tasks: list[int],
    rewards_by_task: Mapping[int, Sequence[float]],
    unknown_by_task: Mapping[int, int],
    options: StatisticsOptions,
    whole: dict[str, Any] | None,
) -> dict[str, Any]:
    """The entry of one value of a split, over its ``tasks``. ``whole``: the group's own entry, when
    they are all of its tasks (one dataset file, the usual run): it is theirs too, as its sums are
    exact whatever the order the tasks come in (``fsum``, and counts); not where rewards fall outside
    the range, whose lowest and highest could be a zero of either sign, as the order met them."""
    if whole is not None and "rewards_outside_range" not in whole:
        return copy.deepcopy(whole)  # its own lists: the two entries are written, never shared
    return statistics_entry(
        {t: rewards_by_task[t] for t in tasks if t in rewards_by_task},
        {t: unknown_by_task[t] for t in tasks if t in unknown_by_task},
        options.reward_range,
    )


def _detectable(rewards_by_task: Mapping[int, Sequence[float]]) -> float | None:
    """The smallest difference a paired comparison of this run with another of its size detects
    (80% power, 5% level, ``power.CORRELATION`` between the two runs' task scores); None with fewer
    than two tasks or a non-finite reward."""
    from pytest_rollouts.scoring.power import minimum_detectable, variance_components

    try:
        found = minimum_detectable(variance_components(list(rewards_by_task.values())))
    except (ValueError, OverflowError):
        return None
    return found if math.isfinite(found) else None


def task_labels(materialized: Path, recorded: RunManifest | None, field: str | None) -> TaskLabels:
    """Each task's dataset file (from the run's manifest, ``recorded``; none without one) and, with
    ``field``, its value of that field (JSON text for a non-string, ``(none)`` when absent), read from
    the materialized rows."""
    datasets = (
        () if recorded is None else tuple((d.first_task, d.first_task + d.rows, d.path) for d in recorded.datasets)
    )
    values: dict[int, str] = {}
    if field is not None:
        for row in read_rows(materialized):
            task = key_of(row)[0]
            if task not in values:
                value = row.get(field)
                values[task] = "(none)" if value is None else value if isinstance(value, str) else _json_text(value)
    return TaskLabels(datasets, field, values)


def _json_text(value: Any) -> str:
    """A row's value as JSON writes it (``{"a": -2.5}``, ``true``), not as Python prints it."""
    import orjson

    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def unknown_rollouts(coverage: Coverage) -> int:
    """Rollouts the mean does not cover and the agent did not mask: failed, without a reward, no row."""
    return coverage.expected - coverage.masked - coverage.scored


def run_lower_bound(score: RunScore) -> float | None:
    """The run's Manski lower bound: each group's, weighted by the rollouts it bounds, as the mean is."""
    pairs = []
    for group in score.groups:
        entry = group.metrics.get(STATISTICS)
        if isinstance(entry, dict) and entry.get("manski_bounds/reward") is not None:
            pairs.append(
                (entry["manski_bounds/reward"][0], entry["num_rollouts_scored"] + entry["num_rollouts_unknown"])
            )
    weight = sum(n for _, n in pairs)
    return sum(low * n for low, n in pairs) / weight if weight else None
