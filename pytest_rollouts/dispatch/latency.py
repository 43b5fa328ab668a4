"""Rollout latencies as the dispatcher sees them: the live line's p50 and p90 over every rollout
finished, not only those pytest has reported (it reports in plan order, behind any slow one).

Kept in log-spaced bins 2% wide, so adding one costs a logarithm and reading the quantiles a pass
over at most a few hundred bins, however many rollouts ran; read again once a second, or sooner
when a tenth more rollouts finished (a short run's early rollouts are not its typical ones).
"""

from __future__ import annotations

import math
import time
from collections import Counter

# Bins are 2% wide from 0.1 ms up: a quantile is off by at most 2%, which the line's two decimals hide.
RATIO = 1.02
FLOOR_S = 1e-4
REFRESH_S = 1.0
# ``math.log(x, RATIO)`` is ``math.log(x) / math.log(RATIO)``, the same float: its divisor is taken once.
_LOG_RATIO = math.log(RATIO)


class LatencySketch:
    def __init__(self) -> None:
        self._bins: Counter[int] = Counter()
        self._count = 0
        self._read_at = -math.inf
        self._read_count = 0
        self._last: list[float] | None = None

    def add(self, seconds: float) -> None:
        self._bins[int(math.log(max(seconds, FLOOR_S) / FLOOR_S) / _LOG_RATIO)] += 1
        self._count += 1

    def p50_p90(self) -> list[float] | None:
        """[p50, p90] in seconds (each bin's upper edge), None before the first rollout."""
        now = time.monotonic()
        grown = self._count >= self._read_count * 1.1 and self._count > self._read_count
        if self._count and (grown or now - self._read_at >= REFRESH_S):
            self._read_at, self._read_count, self._last = now, self._count, self._quantiles((0.5, 0.9))
        return self._last

    def _quantiles(self, qs: tuple[float, ...]) -> list[float]:
        found, seen, wanted = [], 0, [q * self._count for q in qs]
        for index in sorted(self._bins):
            seen += self._bins[index]
            while wanted and seen >= wanted[0]:
                wanted.pop(0)
                found.append(round(FLOOR_S * RATIO ** (index + 1), 6))
        return found
