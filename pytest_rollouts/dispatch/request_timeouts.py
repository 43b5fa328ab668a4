"""Every ``/run`` request's timeout, from one timer for all of them.

``asyncio.timeout`` schedules a timer per request and cancels it when the reply comes: against a
fast agent that is a tenth of the dispatcher's CPU per rollout. Here every request shares one
duration (``--rollouts-timeout``), so they run out in the order they started, and one timer, set
for the oldest request still running, serves them all. A request that runs out has its task
cancelled, and the cancel is taken back and reported as a timeout, as ``asyncio.timeout`` does.
"""

from __future__ import annotations

import asyncio

# A timer may run this much early (uvloop's clock counts milliseconds): a request that has as
# little left has run out, rather than the timer set again for a moment's time.
EARLY_S = 1e-3


class RequestTimeouts:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        # Running requests' tasks in the order they started: when each started (the loop's clock),
        # and how many cancels it already had then (one of those is not this class's to take back).
        self._running: dict[asyncio.Task[object], tuple[float, int]] = {}
        # Tasks cancelled for running out, not yet ended: the cancels each had when it started.
        self._expired: dict[asyncio.Task[object], int] = {}
        self._timer: asyncio.TimerHandle | None = None

    def begin(self) -> asyncio.Task[object]:
        """A request starts in the current task, which its timeout will cancel; pass it to ``end``."""
        task = asyncio.current_task()
        assert task is not None, "a request runs in a task"
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._running[task] = (now, task.cancelling())
        if self._timer is None:  # else it is set for an older request, which runs out first
            self._timer = loop.call_at(now + self.seconds, self._expire)
        return task

    def end(self, task: asyncio.Task[object]) -> bool:
        """The request of ``task`` ended; True if it ran out of time, and the ``CancelledError`` it
        ended with was this class's cancel (taken back now), not another one. Ending it again does nothing."""
        if self._running.pop(task, None) is not None:
            if not self._running and self._timer is not None:  # none left to time: no timer outlives them
                self._timer.cancel()
                self._timer = None
            return False
        if task not in self._expired:
            return False
        return task.uncancel() <= self._expired.pop(task)

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._timer = None
        expired = []
        for task, (started, _) in self._running.items():
            if started + self.seconds > now + EARLY_S:
                self._timer = loop.call_at(started + self.seconds, self._expire)
                break
            expired.append(task)
        for task in expired:
            self._expired[task] = self._running.pop(task)[1]
            task.cancel()
