"""Progress while a run goes: when a progress line is due, and what it says.

On a terminal one line is redrawn in place every few seconds; in a log (not a terminal) a plain
line is written every 10% or 5 minutes, so a long run's log says how far it got without a line
per item.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_rollouts.pytest.report import Tally

CLEAR_TO_END = "\x1b[K"


@dataclass
class Progress:
    """When to show progress: every few seconds on a terminal (one line redrawn in place), every
    10% or 5 minutes in a log (a plain line each time)."""

    tty: bool
    total: int = 0
    last_at: float = field(default_factory=time.monotonic)
    last_done: int = 0

    # A redraw in place costs nothing on screen; a new line (a -v session) is kept rarer.
    tty_every_s: float = 5.0
    LIVE_EVERY_S = 2.0
    LOG_EVERY_S = 300.0
    LOG_EVERY_FRACTION = 0.1

    def due(self, done: int) -> bool:
        now = time.monotonic()
        if self.tty:
            ready = now - self.last_at >= self.tty_every_s
        else:
            step = max(1, int(self.total * self.LOG_EVERY_FRACTION))
            ready = now - self.last_at >= self.LOG_EVERY_S or done - self.last_done >= step
        if ready and done < self.total:
            self.last_at, self.last_done = now, done
            return True
        return False


def own_line(terminal: Any, line: str) -> None:
    """``line`` on a line of its own, at once, whatever pytest left open before it."""
    terminal.ensure_newline()
    if terminal.config.get_terminal_writer().width_of_current_line:
        # Letters with no file name before them (xdist's), which write_line would not end.
        terminal.write("\n")
    terminal.write_line(line)


def line_start(terminal: Any) -> str:
    """What pytest wrote at the start of the current line: the dataset's path and a space."""
    if terminal.currentfspath is None:
        return ""
    return os.path.relpath(terminal.currentfspath, terminal.startpath) + " "


def progress_line(
    tally: Tally,
    total: int,
    in_flight: tuple[int, float | None, list[int] | None] | None,
    finished: tuple[int, int, dict[str, int]] | None = None,
) -> str:
    """``finished``: the dispatcher's (tasks finished, rollouts sent, failures by class). It runs
    ahead of the items pytest reports in plan order; a resumed run's settled items it never sees,
    so each figure is the larger of the two."""
    from pytest_rollouts.scoring.metrics import latency_summary  # not at import: every pytest session loads this

    latency = latency_summary(tally.durations)
    done, sent, failures = tally.items, len(tally.durations), tally.failures
    if finished is not None:
        done, sent, failures = max(done, finished[0]), max(sent, finished[1]), failures | Counter(finished[2])
    parts = [f"rollouts: {done}/{total} tasks done"]
    if in_flight is not None:
        parts.append(f"{in_flight[0]} in flight")
    # Up to now: a line written while a slow rollout holds the run up shows the rate falling.
    parts.append(f"{tally.per_hour(time.perf_counter(), sent):.0f}/h")
    if latency["count"]:
        parts.append(f"p50 {latency['p50']:.2f}s p90 {latency['p90']:.2f}s")
    if failures:
        parts.append("failures: " + ", ".join(f"{n} {c}" for n, c in sorted(failures.items())))
    if in_flight is not None and in_flight[2] is not None and in_flight[1] is not None:
        task, rollout = in_flight[2]
        parts.append(f"oldest in flight: task {task} rollout {rollout}, {in_flight[1]:.0f}s")
    return ", ".join(parts)
