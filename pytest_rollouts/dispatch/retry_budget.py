"""One retry budget per run: retries at most a fraction of the requests sent lately, plus a floor.

Each rollout retrying on its own turns an overloaded agent into a retry storm: every request
that fails comes back ``--rollouts-retries`` times, so the load grows just as the agent can
take least. The budget bounds the extra load instead: over the last ``WINDOW_S`` seconds,
retries may be at most ``fraction`` of the first tries sent, plus ``FLOOR_PER_S`` a second so
that a small or slow run still retries its few transient failures. A retry the budget refuses
is not lost: its failure row is written (a resume sends the rollout again), and the run says
how many were refused.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 10
FLOOR_PER_S = 10


class RetryBudget:
    """Counts first tries and retries in one-second buckets over the last ``WINDOW_S`` seconds."""

    def __init__(self, fraction: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._fraction = fraction
        self._clock = clock
        # [second, first tries, retries], oldest first; totals kept alongside.
        self._buckets: deque[list[int]] = deque()
        self._sent = 0
        self._retried = 0

    def sent(self, now: float) -> None:
        """A first try went out at ``now`` (the clock's time, which the caller read already): it
        earns ``fraction`` of a retry."""
        second = int(now)
        if not self._buckets or self._buckets[-1][0] != second:
            self._bucket(second)
        self._buckets[-1][1] += 1
        self._sent += 1

    def allow(self) -> bool:
        """Whether a retry may go out now; if so, it is spent."""
        bucket = self._bucket(int(self._clock()))
        if self._retried >= self._fraction * self._sent + FLOOR_PER_S * WINDOW_S:
            return False
        bucket[2] += 1
        self._retried += 1
        return True

    def _bucket(self, now: int) -> list[int]:
        """The bucket of second ``now``, once the buckets older than the window are dropped."""
        buckets = self._buckets
        while buckets and buckets[0][0] <= now - WINDOW_S:
            _, sent, retried = buckets.popleft()
            self._sent -= sent
            self._retried -= retried
        if not buckets or buckets[-1][0] != now:
            buckets.append([now, 0, 0])
        return buckets[-1]
