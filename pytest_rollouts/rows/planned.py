"""What a run dispatches: each materialized rollout and where its request body sits, and what
earlier runs already settled (on resume).

Planning makes these from dataset rows; dispatch reads them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import field

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.records import RolloutOutcome

# A rollout's key: (task index, rollout index).
Key = tuple[int, int]


@datatype(slots=True)
class PlannedRollout:
    """One materialized rollout: its identity and where its request body sits on disk."""

    slot: int
    task_index: int
    rollout_index: int
    agent: str
    offset: int
    length: int
    first_attempt: int = 0
    episode: bool = False
    # A flat row sent through an environment server (stamped with it in its materialized row).
    via_server: bool = False


# A column's array type codes, narrowest first: each starts at a byte a value and widens when a
# value does not fit (task numbers past 255, offsets past 4 GB).
WIDTHS = ("B", "H", "I", "q")
# The columns, in the order the dispatcher process is sent them (``dispatch.messages``); ``agent``
# holds each rollout's agent as its position in ``PlannedRollouts.agent_names``.
COLUMNS = ("slot", "task", "rollout", "offset", "length", "first_attempt", "agent", "episode", "via_server")


class PlannedRollouts:
    """A plan's rollouts in order, as columns of integers: a rollout costs some 15 bytes here,
    where a ``PlannedRollout`` and its int objects cost 145 (a million rollouts: 15 MB, not 145).

    Indexing and iteration make each ``PlannedRollout`` as it is asked for, so a dispatch holds
    the ones in flight as objects, never the whole plan.
    """

    __slots__ = ("_agent_codes", "_columns", "agent_names")

    def __init__(self, rollouts: Iterable[PlannedRollout] = ()) -> None:
        self._columns = [array(WIDTHS[0]) for _ in COLUMNS]
        self.agent_names: list[str] = []
        self._agent_codes: dict[str, int] = {}
        for rollout in rollouts:
            self.append(rollout)

    def __len__(self) -> int:
        return len(self._columns[0])

    def __getitem__(self, position: int) -> PlannedRollout:
        slot, task, rollout, offset, length, first_attempt, agent, episode, via_server = self._columns
        return PlannedRollout(
            slot[position],
            task[position],
            rollout[position],
            self.agent_names[agent[position]],
            offset[position],
            length[position],
            first_attempt[position],
            bool(episode[position]),
            bool(via_server[position]),
        )

    def __iter__(self) -> Iterator[PlannedRollout]:
        return map(self.__getitem__, range(len(self)))

    def column(self, name: str) -> array:
        """One of ``COLUMNS``, to read: the dispatcher process's plan is sent as these."""
        return self._columns[COLUMNS.index(name)]

    def agents(self) -> set[str]:
        """The agents the planned rollouts go to (a name is kept from its first rollout on)."""
        return set(self.agent_names)

    def append(self, rollout: PlannedRollout) -> None:
        self.add(
            rollout.slot,
            rollout.task_index,
            rollout.rollout_index,
            rollout.agent,
            rollout.offset,
            rollout.length,
            rollout.first_attempt,
            rollout.episode,
            rollout.via_server,
        )

    def add(
        self,
        slot: int,
        task_index: int,
        rollout_index: int,
        agent: str,
        offset: int,
        length: int,
        first_attempt: int = 0,
        episode: bool = False,
        via_server: bool = False,
    ) -> None:
        """``append`` of a ``PlannedRollout`` made of these fields, without making it: materializing
        plans one a rollout, and the object would be dropped at once."""
        code = self._agent_codes.get(agent)
        if code is None:
            code = self._agent_codes[agent] = len(self.agent_names)
            self.agent_names.append(agent)
        size = len(self._columns[0])
        try:  # one statement a column: a loop over them costs as much again as the appends
            slots, tasks, rollouts, offsets, lengths, attempts, agents, episodes, via_servers = self._columns
            slots.append(slot)
            tasks.append(task_index)
            rollouts.append(rollout_index)
            offsets.append(offset)
            lengths.append(length)
            attempts.append(first_attempt)
            agents.append(code)
            episodes.append(episode)
            via_servers.append(via_server)
        except OverflowError:  # a value past its column's width: the columns not appended to yet, widened where needed
            values = (slot, task_index, rollout_index, offset, length, first_attempt, code, episode, via_server)
            for index, value in enumerate(values):
                if len(self._columns[index]) == size:
                    try:
                        self._columns[index].append(value)
                    except OverflowError:
                        self._columns[index] = _widened(self._columns[index], value)

    def sort_by_task(self, key: Callable[[int], float]) -> None:
        """Reorder the rollouts by ``key`` of their task index, ascending and stable (as
        ``list.sort`` would), with no object per rollout on the way: ``key`` is asked once a task."""
        keys: dict[int, float] = {}
        buckets: dict[float, array] = {}
        for position, task in enumerate(self.column("task")):
            value = keys.get(task)
            if value is None:
                value = keys[task] = key(task)
            bucket = buckets.get(value)
            if bucket is None:
                bucket = buckets[value] = array("q")
            bucket.append(position)
        order = array("q")
        for value in sorted(buckets):
            order.extend(buckets.pop(value))
        self._columns = [array(column.typecode, map(column.__getitem__, order)) for column in self._columns]

    def clear(self) -> None:
        """Let every rollout go (a run's, once all were sent: what it holds while it is scored)."""
        self._columns = [array(WIDTHS[0]) for _ in COLUMNS]
        self.agent_names.clear()
        self._agent_codes.clear()


def _widened(column: array, value: int) -> array:
    """``column`` in the narrowest wider type that holds ``value`` too, with ``value`` appended."""
    for code in WIDTHS[WIDTHS.index(column.typecode) + 1 :]:
        try:
            wider = array(code, (value,))
        except OverflowError:
            continue
        return array(code, column) + wider
    raise OverflowError(f"{value} does not fit a plan's column")


@datatype
class Plan:
    """What this session dispatches, and what earlier runs already settled (on resume)."""

    rollouts: PlannedRollouts
    slots: int
    prior: dict[int, list[RolloutOutcome]] = field(default_factory=dict)
    # Every materialized row by its group (``records.metrics_group``) and key, and its offset:
    # what scoring counts against.
    expected: dict[str, Mapping[Key, int]] = field(default_factory=dict)
