"""pytest-xdist support: keep every worker's window full, survive a dead worker, and refuse
modes that would duplicate rollouts.

A worker's dispatcher can only look ahead at the items xdist has already queued for it
(``WorkerInteractor.torun``); with ``--dist load`` the controller refills a worker only
when fewer than two items are queued once items take over 0.1 s, which starves it. The
scheduler here keeps each worker's queue deep enough for twice its share of
``--rollouts-parallel``. A worker that dies costs the run nothing: the controller stops
sending to it, and the item it died in runs again elsewhere (``CrashedWorkers``).
Imported only when xdist calls our hooks.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from xdist.dsession import get_default_max_worker_restart
from xdist.scheduler import LoadScheduling

SUPPORTED = ("no", "load")
WHY_NOT = {
    "worksteal": "it re-sends items another worker already started, which duplicates rollouts",
    "each": "it runs every item on every worker, which duplicates rollouts",
    "loadscope": "it puts a whole dataset file on one worker, which then uses only its share of --rollouts-parallel",
    "loadfile": "it puts a whole dataset file on one worker, which then uses only its share of --rollouts-parallel",
    "loadgroup": "it sends items a few at a time, which starves the look-ahead",
}


def refusal(dist: str) -> str | None:
    """Why rollouts cannot run under ``--dist dist``, or None when they can."""
    if dist in SUPPORTED:
        return None
    reason = WHY_NOT.get(dist, "only --dist load keeps every rollout exactly once at full concurrency")
    return f"rollouts cannot run under --dist {dist}: {reason}; use --dist load (the default of -n)"


class RolloutScheduling(LoadScheduling):  # type: ignore[misc]
    """``LoadScheduling`` that keeps at least ``window`` items queued on every worker."""

    def __init__(self, config: pytest.Config, log: Any, parallel: int, repeats: int) -> None:
        super().__init__(config, log)
        self._parallel = parallel
        self._repeats = repeats
        # Workers a send found dead; their ``errordown`` is queued behind the event being handled.
        self._gone: set[Any] = set()

    def schedule(self) -> None:
        super().schedule()
        for node in list(self.node2pending):
            self._top_up(node)

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        super().check_schedule(node, duration)
        self._top_up(node)

    def _top_up(self, node: Any) -> None:
        if node.shutting_down or not self.pending:
            return
        per_worker = self._parallel / max(1, len(self.node2pending))
        window = max(2, math.ceil(2 * per_worker / self._repeats))
        missing = window - len(self.node2pending[node])
        if missing > 0:
            self._send_tests(node, missing)

    def _send_tests(self, node: Any, num: int) -> None:
        """Send to a live worker only; a send that finds it dead is undone.

        xdist learns that a worker died in the gateway's receiver thread, which queues
        ``errordown`` for the main loop. Events queued before it (the dead worker's own last
        "item done" among them) make the scheduler top that worker up, and the write to its
        closed pipe raised ``OSError: cannot send (already closed?)`` out of the main loop: an
        INTERNALERROR that ended the run. No check before the write can close that window (a
        worker can die between check and write), so a failed write puts the items back at the
        front of ``pending`` and the worker gets nothing more; ``errordown`` then removes it and
        hands its queue to the others, as for any crash.
        """
        if node in self._gone or node.shutting_down:
            return
        tests = self.pending[:num]
        if not tests:
            return
        del self.pending[:num]
        queued = self.node2pending[node]
        queued.extend(tests)
        try:
            node.send_runtest_some(tests)
        except OSError:
            del queued[-len(tests) :]
            self.pending[:0] = tests
            self._gone.add(node)


class CrashedWorkers:
    """The rollout item a worker died in runs again, on a live worker, in the same run.

    xdist reports that item failed ("worker crashed while running"), so the run exited 1
    until a resume, although nothing about its rollouts failed: those the dead worker wrote
    are on disk, and a worker's dispatcher reports a key another process wrote as done
    instead of sending it again (``engine.SharedOutput``). Only while xdist replaces crashed
    workers (``--max-worker-restart``): past that it shuts the session down, and an item put
    back then would silently never run. An item that had already reported its outcome (the
    worker died on its way out of it) is not run, nor counted, twice.
    """

    def __init__(self, config: pytest.Config) -> None:
        self._max_restarts = get_default_max_worker_restart(config)
        self._crashes = 0
        # The last item each worker reported the outcome of.
        self._reported: dict[Any, str] = {}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        # Called with an error exactly when xdist counts a crash (DSession.worker_errordown).
        if error:
            self._crashes += 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self._reported[getattr(report, "node", None)] = report.nodeid

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        if report.outcome != "failed" or not is_rollout_item(crashitem):
            return
        if self._reported.get(getattr(report, "node", None)) == crashitem:
            report.outcome = "passed"  # its own report stands; this one is not counted (teststatus)
            report.longrepr = None
            setattr(report, CRASHED, DONE)
        elif self._max_restarts is None or self._crashes <= self._max_restarts:
            sched.mark_test_pending(crashitem)
            report.outcome = "rerun"  # type: ignore[assignment]
            report.longrepr = f"{report.longrepr}; it runs again on another worker"
            setattr(report, CRASHED, RERUN)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        """pytest's default would show both as failures ('F'); ahead of the rollout reporter's."""
        crashed = getattr(report, CRASHED, None)
        if crashed == RERUN:
            return "rerun", "R", "RERUN"
        return ("", "", "") if crashed == DONE else None


# What ``CrashedWorkers`` made of xdist's report of a worker's crash, as an attribute of that report.
CRASHED = "rollouts_crashed"
RERUN = "rerun"
DONE = "done"


def is_rollout_item(nodeid: str) -> bool:
    """The controller has only node ids: a rollout item's is its dataset's, a ``.jsonl`` file."""
    return nodeid.split("::", 1)[0].endswith(".jsonl")


def worker_queue(config: pytest.Config) -> Any:
    """xdist's queue of item indices for this worker (``WorkerInteractor.torun``), or None."""
    for plugin in config.pluginmanager.get_plugins():
        queue = getattr(plugin, "torun", None)
        if queue is not None and hasattr(queue, "lock"):
            return queue
    return None


def queued_indices(queue: Any) -> list[int]:
    """Indices into ``session.items`` queued behind the running item, in run order."""
    if queue is None:
        return []
    with queue.lock() as items:
        return [i for i in items if isinstance(i, int)]
