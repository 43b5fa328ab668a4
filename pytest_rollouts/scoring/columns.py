"""A group's scored rollouts as columns: one array of 8-byte numbers per field, not a dict per rollout.

A million rollouts held as one object each (a key, a dict of a few numbers) cost over a gigabyte
when a run is scored. Here a rollout costs its numbers: the arrays are indexed by *source
position* (the group's ``KeyIndex``, shared with the output scan, or rows given as a list), and an
``order`` of positions says which rollouts are in and in which order (by task, then rollout).
A field a rollout lacks is NaN in its column: a NaN a row reports is missing too
(``metrics.numeric_fields``), so no value is lost.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from pytest_rollouts.rows.key_index import KeyIndex
from pytest_rollouts.scoring.stats import written

NAN = math.nan


def column(size: int) -> array:
    """A new column of ``size`` missing values."""
    return array("d", [NAN]) * size


class TaskRows(NamedTuple):
    """One task's rollouts: the slice of ``RolloutColumns.order`` they fill (a tuple: one per task,
    100k of them made and held while a group's entries are written)."""

    task: int
    start: int
    stop: int


class RolloutColumns:
    """Rollouts ordered by (task, rollout), each with its numeric fields, read column by column."""

    def __init__(
        self,
        tasks: Sequence[int],
        rollouts: Sequence[int],
        fields: Mapping[str, array],
        order: Sequence[int],
        repeats: Sequence[int] | None = None,
    ) -> None:
        """``tasks``/``rollouts``/``fields``/``repeats`` by source position; ``order``: the positions
        that are rollouts of this group, by key. ``repeats``: each position's place among its task's
        rollouts when that is not its rollout index (a fanned-out agent's indices continue another's)."""
        self._tasks, self._rollouts, self._fields, self.order = tasks, rollouts, fields, order
        self._repeats = repeats

    @classmethod
    def of_rows(cls, rows: Iterable[tuple[int, int, Mapping[str, float], int | None]]) -> RolloutColumns:
        """Columns of rows given one by one as (task, rollout, numeric fields, repeat or None)."""
        listed = sorted(rows, key=lambda row: (row[0], row[1]))
        fields: dict[str, array] = {}
        for at, (_, _, values, _) in enumerate(listed):
            for name, value in values.items():
                fields.setdefault(name, column(len(listed)))[at] = value
        repeats = [row[1] if row[3] is None else row[3] for row in listed]
        return cls([r[0] for r in listed], [r[1] for r in listed], fields, range(len(listed)), repeats)

    def __len__(self) -> int:
        return len(self.order)

    def task(self, i: int) -> int:
        return self._tasks[self.order[i]]

    def rollout(self, i: int) -> int:
        return self._rollouts[self.order[i]]

    def repeat(self, i: int) -> int:
        """The ``i``-th rollout's place among its task's rollouts, for the per-repeat statistics."""
        at = self.order[i]
        return self._rollouts[at] if self._repeats is None else self._repeats[at]

    def values(self, i: int) -> dict[str, float]:
        """The ``i``-th rollout's fields, as ``numeric_fields`` gave them (an infinity a ``NonFinite``)."""
        at = self.order[i]
        out = {}
        for name, values in self._fields.items():
            x = values[at]
            if x == x:
                out[name] = x if -math.inf < x < math.inf else written(x)
        return out

    def field_names(self) -> list[str]:
        """The fields some rollout has, in the order a reader of the rows in order meets them."""
        first = {}
        for name, values in self._fields.items():
            at = next((i for i, position in enumerate(self.order) if values[position] == values[position]), None)
            if at is not None:
                first[name] = at
        return sorted(first, key=first.__getitem__)

    def field(self, name: str, rows: Iterable[int] | None = None) -> Sequence[float]:
        """The field's values over ``rows`` (indices into the order; all by default), the rollouts
        without it left out: an array, or a list when an infinity is among them (kept a ``NonFinite``)."""
        values = self._fields.get(name)
        if values is None:
            return array("d")
        positions = self.order if rows is None else map(self.order.__getitem__, rows)
        found = array("d", map(values.__getitem__, positions))
        if math.isfinite(sum(found)):  # none missing (NaN), none infinite: the common column, kept whole
            return found
        found = array("d", (x for x in found if x == x))
        if math.inf in found or -math.inf in found:
            return [written(x) if not math.isfinite(x) else x for x in found]
        return found

    def field_by_task(self, name: str) -> Mapping[int, Sequence[float]]:
        """Each task's ``field(name, its rows)``, tasks without a value left out, in task order: one
        pass over the order, not one call per task."""
        values = self._fields.get(name)
        if values is None:
            return {}
        by_task: dict[int, array] = {}
        tasks, infinite = self._tasks, set()
        for at in self.order:
            x = values[at]
            if x == x:
                task = tasks[at]
                found = by_task.get(task)
                if found is None:
                    by_task[task] = array("d", (x,))
                else:
                    found.append(x)
                if not -math.inf < x < math.inf:
                    infinite.add(task)
        if not infinite:
            return by_task
        return {task: [written(x) for x in ys] if task in infinite else ys for task, ys in by_task.items()}

    def paired(self, name: str, other: str) -> list[tuple[float, float]]:
        """``(name, other)`` of each rollout that has ``name``, ``other`` 0.0 where it lacks it."""
        values, others = self._fields.get(name), self._fields.get(other)
        if values is None:
            return []
        pairs = ((values[at], math.nan if others is None else others[at]) for at in self.order)
        return [(x, y if y == y else 0.0) for x, y in pairs if x == x]

    def by_task(self) -> Iterator[TaskRows]:
        """Each task's rollouts, in task order (the order keeps a task's rollouts together)."""
        tasks, start, current = self._tasks, 0, None
        for i, at in enumerate(self.order):
            task = tasks[at]
            if task != current:
                if current is not None:
                    yield TaskRows(current, start, i)
                start, current = i, task
        if current is not None:
            yield TaskRows(current, start, len(self.order))

    def by_repeat(self) -> dict[int, array]:
        """Each repeat's rollouts (indices into the order)."""
        repeats = self._rollouts if self._repeats is None else self._repeats
        out: dict[int, array] = {}
        for i, at in enumerate(self.order):
            out.setdefault(repeats[at], array("q")).append(i)
        return out


def repeat_places(index: KeyIndex) -> array | None:
    """Each position's place among its task's rollouts in one group, when that is not its index.

    A fanned-out row continues one task's rollout indices across agents (b runs 2 after a's
    0 and 1), so within b's group its first rollout of a task is repeat 0, not repeat 2:
    per-repeat statistics compare like with like. None when every index already is its place.
    """
    counts = Counter(index.tasks)
    highest: dict[int, int] = {}
    for task, rollout in index:
        if rollout > highest.get(task, -1):
            highest[task] = rollout
    if all(highest[task] == n - 1 for task, n in counts.items()):
        return None
    by_task: dict[int, list[int]] = {}
    for at, task in enumerate(index.tasks):
        by_task.setdefault(task, []).append(at)
    places = array("q", bytes(8 * len(index)))
    for positions in by_task.values():
        for place, at in enumerate(sorted(positions, key=index.rollouts.__getitem__)):
            places[at] = place
    return places
