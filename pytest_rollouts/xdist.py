"""pytest-xdist support: keep every worker's window full, and refuse modes that would duplicate rollouts.

A worker's dispatcher can only look ahead at the items xdist has already queued for it
(``WorkerInteractor.torun``); with ``--dist load`` the controller refills a worker only
when fewer than two items are queued once items take over 0.1 s, which starves it. The
scheduler here keeps each worker's queue deep enough for twice its share of
``--rollouts-parallel``. Imported only when xdist calls our hooks.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
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


def parallel_share(parallel: int, workerinput: dict[str, Any]) -> int:
    """This worker's part of the total ``--rollouts-parallel``: the split is exact, remainder first."""
    count = int(workerinput.get("workercount", 1))
    index = int(str(workerinput.get("workerid", "gw0")).removeprefix("gw") or 0)
    return max(1, parallel // count + (1 if index < parallel % count else 0))


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
