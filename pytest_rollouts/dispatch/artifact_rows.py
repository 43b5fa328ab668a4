"""An attempt's row written where a run keeps it: results to ``<stem>.jsonl``, failures to the sidecar.

The ``Rows`` of a run that writes files, for the dispatcher process and ``dispatch_plan`` alike, so
the two write the same bytes: a result as ``schema.success_row`` builds it (with an ``ng_perf`` from
its trajectory, ``rows/trajectory.py``), redacted as one line,
a failure as given unless ``schema.persisted`` says it is written nowhere. Each row is one
``write`` (``JsonlAppender``); ``sync_periodically`` makes them durable once a second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.rows.schema import persisted, success_row
from pytest_rollouts.rows.trajectory import with_perf
from pytest_rollouts.store.bodies import Bodies
from pytest_rollouts.store.jsonl import ArtifactError, JsonlAppender

SYNC_INTERVAL_S = 1.0


class FileRows:
    """The outputs and the failures sidecar, open for appending until ``close``."""

    def __init__(self, out: Path, failures: Path, redact: Redactor) -> None:
        self._redact = redact
        self._outputs = JsonlAppender(out)
        try:
            self._failures = JsonlAppender(failures)
        except BaseException:
            self._outputs.close()
            raise

    def result(self, reply: dict[str, Any], stamps: dict[str, Any], elapsed: float) -> None:
        """Stored with an ``ng_perf`` built from its ``ng_trajectory`` when it brings one and no ``ng_perf``:
        NeMo Gym's collector adds it to what it stores, not to what ``run_examples`` hands back."""
        row = success_row(with_perf(reply, elapsed), stamps, elapsed)
        self._outputs.append_line(self._redact.line(row))

    def failure(self, row: dict[str, Any]) -> None:
        if persisted(row):
            self._failures.append(row)

    def sync(self) -> None:
        """fsync what was written since the last one (from a worker thread: ``JsonlAppender`` locks)."""
        self._outputs.sync()
        self._failures.sync()

    def close(self) -> None:
        """fsync and close both files, the second even when the first fails; the first failure is raised."""
        failed: ArtifactError | None = None
        for appender in (self._outputs, self._failures):
            try:
                appender.close()
            except ArtifactError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed


async def sync_periodically(sync: Callable[[], None], bodies: Bodies) -> None:
    """``sync`` (a ``FileRows.sync``) at least once a second: a crash loses at most the last second's rows.

    The materialized inputs are checked as often (on the loop's thread, which closes their file):
    request bodies come from the file open here, but scoring and resume read the one at its path.
    Runs until cancelled; an ``ArtifactError`` ends it, and the caller must stop dispatch.
    """
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(SYNC_INTERVAL_S)
        bodies.check()
        await loop.run_in_executor(None, sync)
