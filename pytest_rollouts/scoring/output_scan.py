"""The output file read into each group's tallies as it grows: whole lines only, each once.

Apart from scoring itself (``aggregate.py``): a dispatching session reads the rows already written
while pytest waits on its dispatcher, long before the run is scored.
"""

from __future__ import annotations

import io
import math
import time
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Container, Iterator, Mapping, Sequence, Sized
from pathlib import Path
from typing import Any

from pytest_rollouts.rows.fronting import recorded_fronted_by
from pytest_rollouts.rows.key_index import KeyIndex
from pytest_rollouts.rows.metric_body import ADDED
from pytest_rollouts.rows.records import is_masked, metrics_group, reward_of
from pytest_rollouts.rows.resume import key_of
from pytest_rollouts.scoring.accounting import ROW_MASKED, ROW_READ, ROW_UNREWARDED, Key
from pytest_rollouts.scoring.columns import RolloutColumns, column, repeat_places
from pytest_rollouts.scoring.metrics import numeric_fields
from pytest_rollouts.store.artifacts import ArtifactPaths, artifact_rows, run_row
from pytest_rollouts.store.jsonl import JsonlError, whole_lines

# Output rows are read in pieces of about this size, never a whole (possibly huge) file at once.
READ_CHUNK_BYTES = 1 << 20
# While pytest waits on the dispatcher it reads the outputs for scoring in pieces this
# small (a few ms each, longer only for a row of several MB), and once caught up it looks
# again only after a pause (a look costs syscalls; rows come by hundreds).
READ_AHEAD_BYTES = 1 << 16
READ_AHEAD_PAUSE_S = 0.1


class GroupRows:
    """One agent group while the files are read: its materialized keys, and by each one's position
    what its row said (a byte of flags, its numeric fields in columns) and where that row sits."""

    def __init__(self, expected: Mapping[Key, int]) -> None:
        self.expected = expected if isinstance(expected, KeyIndex) else KeyIndex(expected)
        size = len(self.expected)
        self.flags = bytearray(size)
        self.offsets = array("q", [-1]) * size
        self.columns: dict[str, array] = {}
        # Every top-level field name a real row of the group had (an added zero carries those).
        self.fields: set[str] = set()

    def add(self, at: int, row: dict[str, Any], offset: int) -> None:
        """The row of the rollout at ``at``, the first one read for it."""
        if is_masked(row):
            self.flags[at] = ROW_READ | ROW_MASKED
            return
        values = numeric_fields(row)
        flags = ROW_READ
        if reward_of(row) is None:  # none, or not finite: kept, not scored (the item says no_reward too)
            values.pop("reward", None)
            flags |= ROW_UNREWARDED
        self.flags[at] = flags
        for name, value in values.items():
            values_of = self.columns.get(name)
            if values_of is None:
                values_of = self.columns[name] = column(len(self.flags))
            values_of[at] = value
        self.fields.update(row)
        self.offsets[at] = offset

    def states(self) -> Iterator[tuple[Key, int]]:
        """Every materialized key with its flags (0: no row read)."""
        return zip(self.expected, self.flags, strict=True)

    def real_order(self, also: Container[int] = ()) -> array:
        """The positions of the group's real result rows (not masked), and those in ``also``, by key."""
        flags = self.flags
        wanted = (at for at in self.expected.in_key_order() if flags[at] & (ROW_READ | ROW_MASKED) == ROW_READ)
        if also:
            wanted = (
                at for at in self.expected.in_key_order() if flags[at] & ROW_MASKED == 0 and (flags[at] or at in also)
            )
        return array("q", wanted)

    def rollouts(self, added: Sequence[dict[str, Any]] = ()) -> RolloutColumns:
        """The metric input: the group's real rows and the zeros the scoring policies ``added``
        (rows of keys without a real one), by key. Columns an added row writes into are copied
        first, so the scan's own stay those of the real rows."""
        columns = dict(self.columns)
        places = set()
        for row in added:
            at = self.expected.position(key_of(row))
            assert at is not None and not self.flags[at], "a zero is added only for a key without a row"
            places.add(at)
            for name, value in numeric_fields(row).items():
                if columns.get(name) is self.columns.get(name):
                    columns[name] = array("d", columns[name]) if name in columns else column(len(self.flags))
                columns[name][at] = value
        index = self.expected
        return RolloutColumns(index.tasks, index.rollouts, columns, self.real_order(places), repeat_places(index))

    def unknown_by_task(self, scored: Mapping[int, Sized], expected: Mapping[int, int]) -> dict[int, int]:
        """Per task, its rollouts neither scored (``scored``: each task's rewards) nor masked;
        ``expected``: each task's materialized rollouts in the group."""
        masked: Counter[int] = Counter()
        if (ROW_READ | ROW_MASKED) in self.flags:  # a masked row at all: then find them
            masked.update(self.expected.tasks[at] for at, flags in enumerate(self.flags) if flags & ROW_MASKED)
        left = {task: n - len(scored.get(task, ())) - masked.get(task, 0) for task, n in expected.items()}
        return {task: n for task, n in left.items() if n > 0}

    def metric_order(self, added: Sequence[dict[str, Any]] = ()) -> tuple[Iterator[int], list[dict[str, Any]]]:
        """The group's ``/aggregate_metrics`` body by key (``rows/metric_body.py``): each real row's
        offset in the output file, or ``ADDED`` for the next of the zeros the policies ``added``,
        which are returned in that order too. The offsets are looked up as they are taken."""
        if not added:
            return map(self.offsets.__getitem__, self.real_order()), []
        by_place = {self.expected.position(key_of(row)): row for row in added}
        places = self.real_order(by_place)
        order = (ADDED if at in by_place else self.offsets[at] for at in places)
        return order, [by_place[at] for at in places if at in by_place]


class OutputScan:
    """The output file read into each group's tallies as it grows: whole lines only, each once.

    Scoring needs every output row parsed. A dispatching session has pytest idle while it
    waits on its dispatcher, so it reads the rows already written then (``advance`` with a
    budget), and only the last ones are left for the end of the run, where every second
    is waited for. Reading is in file order either way, so the tallies are the same.
    """

    def __init__(self, path: Path, expected: Mapping[str, Mapping[Key, int]]) -> None:
        """``expected``: each group's keys and where their rows sit in the materialized file
        (a dispatching session's dicts are taken over, not copied)."""
        self.path = path
        self.groups = {name: GroupRows(keys) for name, keys in expected.items()}
        self._offset = 0
        self._line_no = 0
        # The file the rows read so far came from (device, inode), once any came.
        self._identity: tuple[int, int] | None = None

    @classmethod
    def of_files(cls, paths: ArtifactPaths) -> OutputScan:
        expected: defaultdict[str, KeyIndex] = defaultdict(KeyIndex)
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
        for group in self.groups.values():
            at = group.expected.position(key)
            if at is not None:
                if not group.flags[at]:
                    group.add(at, row, offset)
                return


class ReadAhead:
    """A scan advanced while pytest would block on the dispatcher, a little at a time."""

    def __init__(self, scan: OutputScan, first: Callable[[], object] | None = None) -> None:
        self.scan = scan
        self._after = 0.0
        # Work for the first wait, before any row: the door's (loading what scores the run).
        self._first = first

    def step(self) -> bool:
        """Read the outputs written so far (about ``READ_AHEAD_BYTES``); True when more is probably waiting."""
        if self._first is not None:
            first, self._first = self._first, None
            first()
            return True
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
