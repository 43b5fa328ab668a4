"""``group_level_metrics``: one entry per task of a group's default metrics (``metrics.py``),
each built as the metrics file writes it.

An entry is NeMo Gym's: its task's statistics across its repeats, the counts of what arrived, its
rollouts' numbers (``rollout_infos``) and its ``sample`` row. At 100k tasks this is the longest
loop of a run's scoring, so what every entry shares (its fields' statistic names) is worked out once
a group, not once a task.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

from pytest_rollouts.rows.schema import ROLLOUT_INDEX, TASK_INDEX
from pytest_rollouts.scoring.columns import RolloutColumns, TaskRows
from pytest_rollouts.scoring.stats import SummaryNames, add_one_value_summary, field_summary, summary_names


def no_sample(task: int) -> None:
    """No task's row at hand: each entry's ``sample`` is null rather than missing, as in every entry."""
    return None


class TaskEntries(Sequence[dict[str, Any]]):
    """``group_level_metrics``, one task's entry built each time it is read.

    Held at once, 100k tasks' entries (a few dozen statistics each) cost about 200 MB at
    the very end of a run, which made scoring the peak of the whole session's memory.
    """

    def __init__(
        self,
        tasks: Sequence[int],
        rows: RolloutColumns,
        by_task: Mapping[int, TaskRows],
        fields: Sequence[str],
        expected: Mapping[int, int],
        sample: Callable[[int], Mapping[str, Any] | None],
    ) -> None:
        self._tasks, self._rows, self._by_task, self._expected = tasks, rows, by_task, expected
        self._fields = [(field, summary_names(field)) for field in fields]
        self._sample = sample

    def __len__(self) -> int:
        return len(self._tasks)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same entries, as the list it stands for would be."""
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._entry(self._tasks[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(self._entry, self._tasks)

    def _entry(self, task: int) -> dict[str, Any]:
        part = self._by_task.get(task)
        rows = self._rows
        # Its rollouts' indices and numbers as plain lists: a MetricRow each costs more than the rest.
        span = () if part is None else range(part.start, part.stop)
        rollouts, values = [rows.rollout(i) for i in span], [rows.values(i) for i in span]
        entry = _task_entry(task, rollouts, values, self._fields, self._expected.get(task, 0))
        entry["sample"] = self._sample(task)
        return entry


def _task_entry(
    task: int,
    rollouts: Sequence[int],
    rows: Sequence[Mapping[str, float]],
    fields: Sequence[tuple[str, SummaryNames]],
    expected: int,
) -> dict[str, Any]:
    """One task across its repeats: which tasks are flaky, which never arrived, and (``rollout_infos``,
    in rollout order) which of its ``rollouts`` (their indices) gave which numbers (``rows``).
    ``fields``: the group's, each with its statistics' names."""
    entry: dict[str, Any] = {TASK_INDEX: task}
    if len(rows) == 1:  # one rollout per task is common, and 100k tasks make this the hot loop
        values = rows[0]
        for field, names in fields:
            x = values.get(field)
            if x is not None:  # a value is a number (``RolloutColumns.values``), never None
                add_one_value_summary(entry, names, x)
    else:
        columns = _columns(rows)
        for field, _ in fields:
            if field in columns:
                entry.update(field_summary(field, columns[field]))
    entry["num_rollouts"] = len(rows)
    entry["expected_num_rollouts"] = expected
    entry["missing_num_rollouts"] = max(0, expected - len(rows))
    entry["reward_profile_completion_pct"] = 100 * len(rows) / expected if expected else None
    entry["rollout_infos"] = [_rollout_info(task, r, values) for r, values in zip(rollouts, rows, strict=True)]
    return entry


def _columns(rows: Sequence[Mapping[str, float]]) -> dict[str, list[float]]:
    """Each field's values over the rows that have it: a field absent from a row is not a zero."""
    columns: defaultdict[str, list[float]] = defaultdict(list)
    for values in rows:
        for field, value in values.items():
            columns[field].append(value)
    return columns


def _rollout_info(task: int, rollout: int, values: Mapping[str, float]) -> dict[str, Any]:
    """One rollout as NeMo Gym lists it under its task: ``rollout_id`` (``"task:rollout"``) and its
    indices as in the files, to join it to its full row, and the numbers the statistics used.

    Only those numbers, never the row itself: the full rows stay in the rollouts file.
    """
    return {"rollout_id": f"{task}:{rollout}", TASK_INDEX: task, ROLLOUT_INDEX: rollout, **values}
