"""Every materialized rollout of one group by its key, and where its row sits, in arrays.

Scoring counts a run against each of its materialized rollouts. Held as a dict of
``(task, rollout)`` tuples to offsets, a million rollouts cost over 100 MB; here they cost 24 bytes
each and one small entry per task. A key's *position* is the order it was added in (the
materialized file's), so scoring keeps its own per-rollout numbers in arrays by position too.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping

from pytest_rollouts.rows.planned import Key


class KeyIndex(Mapping[Key, int]):
    """Keys to their rows' offsets, in the order they were added; a key set again keeps its place.

    A task's keys are looked up by arithmetic: its first position plus how far the rollout index
    is past that of its first key, which holds when a task's rollouts were added one after the
    other with consecutive indices (how rows are materialized). A key added otherwise (repeats
    interleaved across tasks, gaps in a resumed run's indices) is kept in a dict of its own.
    """

    __slots__ = ("_first", "_odd", "_offset", "_rollout", "_sorted", "_task")

    def __init__(self, items: Mapping[Key, int] | None = None) -> None:
        self._task = array("q")
        self._rollout = array("q")
        self._offset = array("q")
        self._first: dict[int, int] = {}  # task -> the position of its first key
        self._odd: dict[Key, int] = {}  # key -> its position, where the arithmetic does not find it
        self._sorted = True  # were keys added in ascending order (then positions are key order)
        for key, offset in (items or {}).items():
            self[key] = offset

    def position(self, key: Key) -> int | None:
        """Where ``key`` was added, or None when it never was."""
        task, rollout = key
        first = self._first.get(task)
        if first is None:
            return None
        at = first + rollout - self._rollout[first]
        if first <= at < len(self._task) and self._rollout[at] == rollout and self._task[at] == task:
            return at
        return self._odd.get(key)

    def __setitem__(self, key: Key, offset: int) -> None:
        task, rollout = key
        at = len(self._task)
        # Past the last key of keys added in order it is a new one (how rows are materialized):
        # only a key that is not may be here already.
        if at and not (self._sorted and (self._task[-1], self._rollout[-1]) < key):
            found = self.position(key)
            if found is not None:
                self._offset[found] = offset
                return
            self._sorted = False  # not past the last key, and not the last key itself
        first = self._first.setdefault(task, at)
        self._task.append(task)
        self._rollout.append(rollout)
        self._offset.append(offset)
        if first != at and first + rollout - self._rollout[first] != at:
            self._odd[key] = at

    def __getitem__(self, key: Key) -> int:
        at = self.position(key)
        if at is None:
            raise KeyError(key)
        return self._offset[at]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 2 and self.position(key) is not None  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Key]:
        return zip(self._task, self._rollout, strict=True)

    def __len__(self) -> int:
        return len(self._task)

    def key(self, at: int) -> Key:
        return self._task[at], self._rollout[at]

    @property
    def tasks(self) -> array:
        """Each position's task index."""
        return self._task

    @property
    def rollouts(self) -> array:
        """Each position's rollout index."""
        return self._rollout

    @property
    def offsets(self) -> array:
        """Each position's row offset."""
        return self._offset

    def lowest_positions(self) -> Mapping[int, int]:
        """Each task's position of its lowest rollout index: that of its first key, unless a key
        added out of the usual order (``_odd``) is lower. Read it, never change it: without such
        keys it is the index's own record of each task's first position."""
        if not self._odd:
            return self._first
        found = dict(self._first)
        for (task, rollout), at in self._odd.items():
            if rollout < self._rollout[found[task]]:
                found[task] = at
        return found

    def in_key_order(self) -> range | array:
        """Every position, ordered by key: the positions themselves when keys were added in order."""
        if self._sorted:
            return range(len(self._task))
        return array("q", sorted(range(len(self._task)), key=self.key))
