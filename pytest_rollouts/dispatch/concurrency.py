"""Adaptive concurrency (``--rollouts-parallel auto:MAX``): each agent's limit on requests in flight, found by AIMD.

A fixed ``--rollouts-parallel`` either under-uses a fast agent or hammers a slow one. Here each
agent (a ``/run`` server, or a model agent's rollouts) has its own limit, which:

- grows while the agent keeps up: by one per reply until the first cut (slow start, so a fast
  agent is reached in a few round trips), then by one per limit's worth of replies (additive);
- is cut when the agent says it is overloaded: halved on a 429/502/503/504, a connection error
  or a timeout, and by a fifth when latency rises (the recent mean of replies' latency past
  twice its moving minimum), at most once per round trip: the requests already in flight when
  a cut happened were sent under the old limit, so their failures do not cut again.

It never goes above MAX (the global bound every agent shares) nor below one. Each limit's
history is kept, a point per change (every other one, each time a long run's reaches
``MAX_POINTS``), for the metrics file and the report.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import field

from pytest_rollouts.datatype import datatype
from pytest_rollouts.dispatch.record import LimitSeries

# Slow start begins here (or at MAX, if lower): one request finds nothing, a wave finds too much.
START = 4
OVERLOAD_CUT = 0.5
LATENCY_CUT = 0.8
# Latency "rises" once the recent mean is this many times the moving minimum of that mean.
LATENCY_TOLERANCE = 2.0
# The recent mean's weight of a new reply, and how many replies it needs before it is trusted.
RECENT_WEIGHT = 0.1
WARM_UP = 20
# The moving minimum: of the recent mean over the last MIN_WINDOWS windows of WINDOW replies.
WINDOW = 250
MIN_WINDOWS = 4
# The history keeps every change of the limit until it has this many, then every other one.
MAX_POINTS = 1000


@datatype(slots=True)
class _MovingMinimum:
    """The minimum of a value over its last ``WINDOW * MIN_WINDOWS`` samples, in O(1) per sample."""

    windows: deque[float] = field(default_factory=lambda: deque(maxlen=MIN_WINDOWS))
    current: float = float("inf")
    count: int = 0

    def add(self, value: float) -> float:
        self.current = min(self.current, value)
        self.count += 1
        if self.count == WINDOW:
            self.windows.append(self.current)
            self.current, self.count = float("inf"), 0
        return min(self.current, *self.windows) if self.windows else self.current


class AdaptiveLimit:
    """One agent's limit: ``acquire`` waits for room under it, ``release`` adapts it to how the try went."""

    def __init__(self, agent: str, ceiling: int, began: float) -> None:
        self.agent = agent
        self._ceiling = ceiling
        self.limit = float(min(START, ceiling))
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._slow_start = True
        self._last_cut = float("-inf")
        self._recent: float | None = None
        self._replies = 0
        self._floor = _MovingMinimum()
        self._began = began
        self.points: list[list[float]] = [[0.0, int(self.limit)]]

    def has_room(self) -> bool:
        return self._in_flight < int(self.limit)

    async def acquire(self) -> None:
        while self._in_flight >= int(self.limit):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                self._wake()  # the room it was woken for goes to the next one
                raise
        self._in_flight += 1

    def release(self, sent: float | None, elapsed: float, overloaded: bool) -> None:
        """A try sent at ``sent`` (monotonic; None: never sent) ended: ``overloaded`` when the agent
        said so (a gateway status, no reply), else after ``elapsed`` seconds with a reply."""
        self._in_flight -= 1
        if sent is not None:
            self._adapt(sent, elapsed, overloaded)
        self._wake()

    def series(self) -> LimitSeries:
        return LimitSeries(self.agent, self._ceiling, self.points)

    def _adapt(self, sent: float, elapsed: float, overloaded: bool) -> None:
        if overloaded:
            self._cut(sent, OVERLOAD_CUT)
        elif self._latency_rose(elapsed):
            self._cut(sent, LATENCY_CUT)
        elif self._in_flight + 1 >= int(self.limit):  # only a limit in use has shown it can grow
            self._grow()

    def _latency_rose(self, elapsed: float) -> bool:
        recent = elapsed if self._recent is None else self._recent + RECENT_WEIGHT * (elapsed - self._recent)
        self._recent = recent
        self._replies += 1
        floor = self._floor.add(recent)
        return self._replies > WARM_UP and recent > LATENCY_TOLERANCE * floor

    def _grow(self) -> None:
        step = 1.0 if self._slow_start else 1.0 / self.limit
        self._set(min(float(self._ceiling), self.limit + step))

    def _cut(self, sent: float, factor: float) -> None:
        if sent <= self._last_cut:  # sent under the limit before the last cut: already answered for
            return
        self._slow_start = False
        self._last_cut = time.monotonic()
        self._set(max(1.0, self.limit * factor))

    def _set(self, limit: float) -> None:
        before, self.limit = int(self.limit), limit
        if int(limit) == before:
            return
        self.points.append([round(time.monotonic() - self._began, 3), int(limit)])
        if len(self.points) > MAX_POINTS:  # a long run: half the resolution, the first and last point kept
            self.points[1:-1] = self.points[2:-1:2]

    def _wake(self) -> None:
        room = int(self.limit) - self._in_flight
        while room > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                room -= 1
