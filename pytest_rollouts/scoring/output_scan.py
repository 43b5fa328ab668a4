"""The output file read into each group's tallies as it grows: whole lines only, each once.

Apart from scoring itself (``aggregate.py``): a dispatching session reads the rows already written
while pytest waits on its dispatcher, long before the run is scored.
"""

from __future__ import annotations

import io
import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_rollouts.rows.fronting import recorded_fronted_by
from pytest_rollouts.rows.records import is_masked, metrics_group, reward_of
from pytest_rollouts.rows.resume import key_of
from pytest_rollouts.scoring.accounting import Key
from pytest_rollouts.scoring.metrics import MetricRow, numeric_fields
from pytest_rollouts.store.artifacts import ArtifactPaths, artifact_rows, run_row
from pytest_rollouts.store.jsonl import JsonlError, whole_lines

# Output rows are read in pieces of about this size, never a whole (possibly huge) file at once.
READ_CHUNK_BYTES = 1 << 20
# While pytest waits on the dispatcher it reads the outputs for scoring in pieces this
# small (a few ms each, longer only for a row of several MB), and once caught up it looks
# again only after a pause (a look costs syscalls; rows come by hundreds).
READ_AHEAD_BYTES = 1 << 16
READ_AHEAD_PAUSE_S = 0.1


@dataclass
class GroupRows:
    """One agent group while the files are read: keys, small numbers, and where rows sit."""

    expected: dict[Key, int] = field(default_factory=dict)
    completed: set[Key] = field(default_factory=set)
    masked: set[Key] = field(default_factory=set)
    unrewarded: set[Key] = field(default_factory=set)
    rows: list[MetricRow] = field(default_factory=list)
    fields: set[str] = field(default_factory=set)
    output_offsets: dict[Key, int] = field(default_factory=dict)


class OutputScan:
    """The output file read into each group's tallies as it grows: whole lines only, each once.

    Scoring needs every output row parsed. A dispatching session has pytest idle while it
    waits on its dispatcher, so it reads the rows already written then (``advance`` with a
    budget), and only the last ones are left for the end of the run, where every second
    is waited for. Reading is in file order either way, so the tallies are the same.
    """

    def __init__(self, path: Path, expected: Mapping[str, dict[Key, int]]) -> None:
        """``expected``: each group's keys and where their rows sit in the materialized file
        (a dispatching session's dicts are taken over, not copied)."""
        self.path = path
        self.groups = {name: GroupRows(expected=keys) for name, keys in expected.items()}
        self._by_key = {key: name for name, keys in expected.items() for key in keys}
        self._offset = 0
        self._line_no = 0
        # The file the rows read so far came from (device, inode), once any came.
        self._identity: tuple[int, int] | None = None

    @classmethod
    def of_files(cls, paths: ArtifactPaths) -> OutputScan:
        expected: defaultdict[str, dict[Key, int]] = defaultdict(dict)
        front = recorded_fronted_by(paths)
        for _, offset, _, row in artifact_rows(paths.materialized):
            expected[metrics_group(row, front)][key_of(row)] = offset
        return cls(paths.out, expected)

    def advance(self, budget: int | None = None) -> bool:
        """Take in the whole lines written since the last call: about ``budget`` bytes of them,
        or all. True when the budget ran out first, so more is probably waiting."""
        if budget is not None:
            return self._read(budget)
        while self._read(READ_CHUNK_BYTES):
            pass
        return False

    def _read(self, budget: int) -> bool:
        # Which file is taken before it is read: taken after, a removal in between would leave rows
        # read from a file with no identity to compare, and scoring reading them from another.
        identity = _file_identity(self.path) if self._identity is None else self._identity
        data = whole_lines(self.path, self._offset, budget)
        if data:
            self._identity = identity
        for line in io.BytesIO(data):
            if line.strip():
                self._add(run_row(line, self.path, self._line_no + 1), self._offset)
            self._line_no += 1
            self._offset += len(line)
        return len(data) >= budget

    def current(self) -> OutputScan:
        """This scan, or a fresh one if the file it read is no longer the one at its path (removed
        or replaced while the run wrote it): its offsets would point into another file, and the
        score counts what the path holds now."""
        if self._identity is not None and self._identity != _file_identity(self.path):
            return self.restarted()
        return self

    def restarted(self) -> OutputScan:
        """The same scan from the first row: after a read broken off part-way (a bad row, a
        signal), whose tallies may hold half a row."""
        return OutputScan(self.path, {name: group.expected for name, group in self.groups.items()})

    def _add(self, row: dict[str, Any], offset: int) -> None:
        key = key_of(row)
        name = self._by_key.get(key)
        group = self.groups.get(name) if name is not None else None
        if group is None or key in group.completed:
            return
        group.completed.add(key)
        if is_masked(row):
            group.masked.add(key)
            return
        values = numeric_fields(row)
        if reward_of(row) is None:  # none, or not finite: kept, not scored (the item says no_reward too)
            values.pop("reward", None)
            group.unrewarded.add(key)
        group.rows.append(MetricRow(key[0], key[1], values))
        group.fields.update(row)
        group.output_offsets[key] = offset


class ReadAhead:
    """A scan advanced while pytest would block on the dispatcher, a little at a time."""

    def __init__(self, scan: OutputScan) -> None:
        self.scan = scan
        self._after = 0.0

    def step(self) -> bool:
        """Read the outputs written so far (about ``READ_AHEAD_BYTES``); True when more is probably waiting."""
        now = time.monotonic()
        if now < self._after:
            return False
        try:
            more = self.scan.advance(READ_AHEAD_BYTES)
        except BaseException as exc:
            # Broken off part-way: scoring starts over from the first row (and reports a bad one).
            self.scan = self.scan.restarted()
            self._after = math.inf
            if isinstance(exc, JsonlError | OSError):
                return False
            raise
        if not more:
            self._after = now + READ_AHEAD_PAUSE_S
        return more


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino
