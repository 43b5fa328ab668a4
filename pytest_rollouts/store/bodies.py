"""The request bodies a dispatcher sends: read by offset from the materialized inputs it opened.

Scoring and resume read the file at the materialized path, not the one open here, so the
two must stay the same: rows sent while they differ would be counted against requests that
were never sent, or lost from the run's denominator.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_rollouts.store.jsonl import ArtifactError, check_in_place

COMPARE_BYTES = 1 << 20


class Bodies:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        self._written = _written(self._fd)

    def read(self, offset: int, length: int) -> bytes:
        """The body at ``offset``, never a stale read: the file is written whole before the run
        and never touched after, so any change to it in place (truncated, overwritten, as ``cp``
        onto it does) stops dispatch before a request reads the wrong bytes. An ``fstat`` per
        rollout is about a microsecond."""
        if _written(self._fd) != self._written:
            raise ArtifactError(f"{self.path} was changed while the run was reading it")
        body = os.pread(self._fd, length, offset)
        if len(body) != length:
            raise ArtifactError(f"{self.path} was cut short while the run was reading it")
        return body

    def check(self) -> None:
        """``ArtifactError`` unless the file at the path holds exactly the bytes read here.

        Under xdist every worker writes the same materialized rows and renames them into place,
        so a sibling's identical copy may replace the file this one opened: that copy is adopted
        (compared once, after each such replacement, which happens as the workers start).
        Anything else, the file removed or other rows, stops dispatch.
        """
        try:
            check_in_place(self._fd, self.path, "reading")
        except ArtifactError:
            if not self._adopt():
                raise
        if _written(self._fd) != self._written:
            raise ArtifactError(f"{self.path} was changed while the run was reading it")

    def _adopt(self) -> bool:
        """Read from the file now at the path, if it holds the same bytes."""
        try:
            there = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        if not _same_bytes(self._fd, there):
            os.close(there)
            return False
        os.close(self._fd)
        self._fd = there
        self._written = _written(there)
        return True

    def close(self) -> None:
        os.close(self._fd)


def _written(fd: int) -> tuple[int, int]:
    """What changes when a file is written to: its size and modification time."""
    stat = os.fstat(fd)
    return stat.st_size, stat.st_mtime_ns


def _same_bytes(one: int, other: int) -> bool:
    if os.fstat(one).st_size != os.fstat(other).st_size:
        return False
    offset = 0
    while True:
        chunk = os.pread(one, COMPARE_BYTES, offset)
        if chunk != os.pread(other, COMPARE_BYTES, offset):
            return False
        if not chunk:
            return True
        offset += len(chunk)
