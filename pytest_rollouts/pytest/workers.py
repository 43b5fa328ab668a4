"""A run's xdist coordination: what a worker tells its controller, what the controller makes of its
workers' reports, and the look-ahead a worker may take (only what xdist queued for it).

The controller collects and sends nothing itself; its workers prepare the files under the run
id it handed them, dispatch, and report when they go down.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts.dispatch.record import DispatchRecord
from pytest_rollouts.plan.files import put_back
from pytest_rollouts.pytest.items import RolloutItem
from pytest_rollouts.pytest.stash import RUN_ID_KEY
from pytest_rollouts.store.artifacts import ArtifactPaths, RunStart


class Workers:
    """One session's side of the coordination, on the controller or on a worker."""

    def __init__(self, config: pytest.Config, paths: Callable[[], ArtifactPaths]) -> None:
        self._config = config
        self._paths = paths
        # On a controller, what each worker said of its part when it went down (None: it crashed
        # before saying anything).
        self._reports: list[dict[str, Any] | None] = []
        # The controller put the files back as it found them: no run of its own is left to score.
        self.taken_back = False
        # On a worker: why it refused the run before any request, once its files were prepared, and
        # the exit status one process gives for it (a usage error 4, unhealthy agents 2).
        self.refusal: tuple[str, int] | None = None
        self._queue: Any = None
        # On a controller, the routing keys its workers found no row for, or "".
        self.unmatched = ""
        self._began = time.time()
        # On a controller: workers that collected, and the rollouts those that reported said they sent.
        self.collected = 0
        self._sent = 0
        # On a controller: its workers' dispatchers' account of adaptive limits and retries.
        self.dispatch_record = DispatchRecord()

    def started(self) -> bool:
        """On a controller: its workers prepared the files under its run id."""
        run_id = self._config.stash.get(RUN_ID_KEY, None)
        return run_id is not None and self._paths().started_by(run_id)

    @staticmethod
    def report(
        dispatched: bool,
        sent: int,
        start: RunStart,
        unmatched: str,
        resuming: bool,
        record: tuple[str, DispatchRecord],
    ) -> dict[str, Any]:
        """What a worker tells its controller: whether it sent anything and how many rollouts (its
        items may have reported fewer), what preparing the files did (only the worker that prepared
        them did anything), the routing keys no row matched (the controller collects no row to
        tell), and whether the run resumes (the controller, which collects nothing, cannot know).
        Why it refused the run goes apart (``role.REFUSAL``): a run may be refused before the
        controller holds one. ``record``: the worker's id and its dispatchers' account (``dispatch/record.py``)."""
        moved = start.moved_to
        return {
            "resuming": resuming,
            "dispatched": dispatched,
            "sent": sent,
            "unmatched": unmatched,
            "moved_to": None if moved is None else str(moved),
            "kept": start.kept,
            "replaced": start.replaced,
            "repaired": {str(path): size for path, size in (start.repaired or {}).items()},
            "worker": record[0],
            "dispatch": record[1].as_report(),
        }

    def hear(self, report: dict[str, Any] | None) -> None:
        """A worker went down: the controller's terminal, the only one shown, says what the worker
        that prepared the files did to them (the others report nothing done)."""
        from pytest_rollouts.pytest.task_numbers import tell_start

        self._reports.append(report)
        if report is not None:
            self.unmatched = self.unmatched or report["unmatched"]
            self._sent += report["sent"]
            worker = str(report.get("worker", ""))
            self.dispatch_record = self.dispatch_record.merged(DispatchRecord.from_report(report["dispatch"]), worker)
            moved = report["moved_to"]
            start = RunStart(
                moved_to=None if moved is None else Path(moved),
                repaired={Path(path): size for path, size in report["repaired"].items()},
                kept=report["kept"],
                replaced=report["replaced"],
            )
            tell_start(self._config, start, self._paths().out)

    @property
    def sent(self) -> int | None:
        """On a controller, the rollouts its workers sent; None while one has not said (a stop
        can end the controller's session before its workers report)."""
        said = [report for report in self._reports if report is not None]
        return self._sent if self.collected and len(said) == self.collected else None

    def put_back_unsent(self, resuming: bool) -> str:
        """On a controller: a fresh run that no worker sent anything for (each refused, as one
        process would) leaves the files as it found them, as one process does; what to tell.

        Only when every worker said so: one that crashed may have sent requests.
        """
        reports = self._reports
        resuming = resuming or any(r is not None and r["resuming"] for r in reports)
        if resuming or not self.started() or any(r is not None and r["dispatched"] for r in reports):
            return ""
        paths = self._paths()
        preparer = next((r for r in reports if r is not None and r["moved_to"]), None)
        start = RunStart() if preparer is None else RunStart(Path(preparer["moved_to"]), replaced=preparer["replaced"])
        unheard = not reports or None in reports or len(reports) < self.collected
        if unheard:
            # A stop can end the controller's session before its workers say what they did: then
            # only the files tell. A run that wrote no row has nothing to keep, and the earlier
            # results it moved aside are in the folder made since this session began.
            if any(path.exists() and path.stat().st_size for path in (paths.out, paths.failures)):
                return ""
            start = start if preparer is not None else self._moved_since_start(paths)
        self.taken_back = True
        back = put_back(paths, start, resuming=False).lstrip("\n")
        if not unheard:
            return back
        kept = "the earlier results are back in place" if start.moved_to is not None else "its files are removed"
        return f"Interrupted before any result was written: {kept}."

    def _moved_since_start(self, paths: ArtifactPaths) -> RunStart:
        """Where this run moved the earlier results, found on disk: the newest folder made since it began."""
        made = [p for p in paths.moved_aside() if p.stat().st_mtime >= self._began]
        if not made:
            return RunStart()
        newest = max(made, key=lambda p: p.stat().st_mtime)
        return RunStart(newest, replaced=newest.name.startswith("."))

    def hold_back(self, session: pytest.Session, refusal: str) -> bool:
        """On a worker, before its loop: whether it runs nothing, as one process would not.

        One process runs no item after a run refused while collecting (``refusal``) or a
        collection error; xdist's worker loop would run them all the same, failing each for want
        of a dispatcher. The worker must not end its session on its own either: its controller
        queued items for it, and crashes on a worker that ends without a stop. So the worker
        stops, which ends the controller's session: as interrupted by the collection errors, as
        in one process, or with the usage error its workers refused the run with (``plugin.py``).
        """
        errors = 0 if self._config.option.continue_on_collection_errors else session.testsfailed
        if not (refusal or errors):
            return False
        # pytest's own words for the collection errors, as one process stops with them.
        session.shouldstop = refusal or f"{errors} error{'s' if errors != 1 else ''} during collection"
        return True

    def queued_slots(self, items: Sequence[pytest.Item]) -> list[int]:
        """On a worker, the tasks queued behind the running one: its only safe look-ahead."""
        from pytest_rollouts.pytest.xdist import queued_indices, worker_queue

        if self._queue is None:
            self._queue = worker_queue(self._config)
        return [item.slot for i in queued_indices(self._queue) if isinstance(item := items[i], RolloutItem)]
