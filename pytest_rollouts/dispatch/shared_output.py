"""Under xdist, the rows other workers already wrote to the output all of them share.

A task re-queued from a crashed worker may already have rows on disk: the output is read
incrementally (new whole lines only), and a key another process already wrote is reported
as cached instead of being run twice.
"""

from __future__ import annotations

from pathlib import Path

from pytest_rollouts.rows.records import RolloutOutcome
from pytest_rollouts.rows.schema import ROLLOUT_INDEX, TASK_INDEX
from pytest_rollouts.store.jsonl import loads, whole_lines


class SharedOutput:
    """The keys (and their outcomes) in an output file other processes append to, read as it grows."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._outcomes: dict[tuple[int, int], RolloutOutcome] = {}

    def outcome(self, task: int, rollout: int) -> RolloutOutcome | None:
        """The rollout as cached when some process already wrote its row, else None."""
        self._refresh()
        return self._outcomes.get((task, rollout))

    def _refresh(self) -> None:
        data = whole_lines(self._path, self._offset)
        for line in data.splitlines():
            if line.strip():
                row = loads(line)
                rollout = row[ROLLOUT_INDEX]
                self._outcomes[(row[TASK_INDEX], rollout)] = RolloutOutcome.of_result(rollout, row, 0.0, 0, cached=True)
        self._offset += len(data)
