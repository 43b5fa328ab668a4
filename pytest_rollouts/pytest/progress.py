"""Progress while a run goes: when a progress line is due, and what it says.

On a terminal one line is redrawn in place every few seconds; in a log (not a terminal) a plain
line is written every 10% or 5 minutes, so a long run's log says how far it got without a line
per item.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import field
from typing import TYPE_CHECKING, Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.rows.records import NO_REWARD

if TYPE_CHECKING:
    from pytest_rollouts.pytest.tally import Tally

# The dispatcher's view of a run (``dispatch.channel.Dispatcher.finished``): tasks finished, rollouts
# sent, failures by class, [p50, p90] latency (None before the first), what was masked and dropped.
Finished = tuple[int, int, dict[str, int], list[float] | None, MaskingCounts]
# (requests in flight, the oldest's age, its task and rollout), as a dispatcher reports them.
InFlight = tuple[int, float | None, list[int] | None]

CLEAR_TO_END = "\x1b[K"


@datatype
class Progress:
    """When to show progress: every few seconds on a terminal (one line redrawn in place), every
    10% or 5 minutes in a log (a plain line each time)."""

    tty: bool
    total: int = 0
    last_at: float = field(default_factory=time.monotonic)
    last_done: int = 0
    # The tasks done the last line showed, and whether the line now due is the slow clock's (a
    # stalled run's line says how long the oldest request has waited, even with no task done).
    shown_done: int = -1
    by_clock: bool = False

    # A new line on a terminal (a -v session) is kept rarer than a redraw in place, which costs nothing
    # on screen and comes every --rollouts-progress-interval (set by the reporter).
    tty_every_s: float = 5.0
    LOG_EVERY_S = 300.0
    LOG_EVERY_FRACTION = 0.1

    def due(self, done: int) -> bool:
        now = time.monotonic()
        if self.tty:
            ready = now - self.last_at >= self.tty_every_s
        else:
            step = max(1, int(self.total * self.LOG_EVERY_FRACTION))
            self.by_clock = now - self.last_at >= self.LOG_EVERY_S
            ready = self.by_clock or done - self.last_done >= step
        if ready and done < self.total:
            self.last_at, self.last_done = now, done
            return True
        return False

    def line(
        self,
        tally: Tally,
        in_flight: InFlight | None,
        finished: Finished | None,
    ) -> str | None:
        """The line now due, or None when in a log it would only repeat the last one's count.

        Lines fall due as pytest reports items, in plan order, while the dispatcher has often
        finished every task already: a log then got ``20/20 tasks done`` line after line."""
        done = tasks_done(tally, finished)
        if not self.tty and done == self.shown_done and not self.by_clock:
            return None
        self.shown_done = done
        return progress_line(tally, self.total, in_flight, finished)


def own_line(terminal: Any, line: str) -> None:
    """``line`` on a line of its own, at once, whatever pytest left open before it."""
    terminal.ensure_newline()
    if terminal.config.get_terminal_writer().width_of_current_line:
        # Letters with no file name before them (xdist's), which write_line would not end.
        terminal.write("\n")
    terminal.write_line(line)


def tell(config: Any, notice: str) -> bool:
    """``notice`` as a plain ``rollouts:`` line where the run shows, at once or (told while pytest
    configures, before its terminal is there) as the session starts; whether it will be shown (an
    xdist worker has no terminal). Not a warning: ``-W error`` made those crashes."""
    from pytest_rollouts.pytest.role import role
    from pytest_rollouts.pytest.stash import NOTICES_KEY

    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        own_line(terminal, "rollouts: " + notice)
    elif role(config).owns_run:
        config.stash.setdefault(NOTICES_KEY, []).append(notice)
    return terminal is not None or role(config).owns_run


def line_start(terminal: Any) -> str:
    """What pytest wrote at the start of the current line: the dataset's path and a space."""
    if terminal.currentfspath is None:
        return ""
    return os.path.relpath(terminal.currentfspath, terminal.startpath) + " "


def progress_line(
    tally: Tally,
    total: int,
    in_flight: InFlight | None,
    finished: Finished | None = None,
) -> str:
    """``finished``: the dispatcher's (tasks finished, rollouts sent, failures by class, latency, masking).
    It runs ahead of the items pytest reports in plan order; a resumed run's settled items it never
    sees, so each count is the larger of the two, and the latency is the dispatcher's when it has
    one (the reported items' would leave out the slow rollouts they wait behind).

    What the run lost to masked and dropped rollouts (``rows/masking.py``) follows the failures, and
    only when there is any: a healthy run's line is what it was."""
    from pytest_rollouts.scoring.perf import latency_summary  # not at import: every pytest session loads this

    reported = latency_summary(tally.durations)
    latency = [reported["p50"], reported["p90"]] if reported["count"] else None
    sent = len(tally.durations)
    # A result without a reward is failed, as the gate counts it; an xdist controller learns it from reports.
    failures = tally.counts.failed_by_class + Counter({NO_REWARD: tally.counts.unrewarded})
    masking = tally.masking()
    if finished is not None:
        sent, failures = max(sent, finished[1]), failures | Counter(finished[2])
        latency = finished[3] or latency
        masking = masking.most(finished[4])
    parts = [f"rollouts: {tasks_done(tally, finished)}/{total} tasks done"]
    # The failed count first, then its classes, and only then the rest: a line cut to a narrow
    # terminal's width keeps the count.
    if failures:
        classes = ", ".join(f"{n} {c}" for n, c in sorted(failures.items()))
        parts.append(f"{sum(failures.values())} failed ({classes})")
    if lost := masking.line():
        parts.append(lost)
    if in_flight is not None:
        parts.append(f"{in_flight[0]} in flight")
    # Up to now: a line written while a slow rollout holds the run up shows the rate falling.
    parts.append(rate(tally.per_hour(time.perf_counter(), sent)))
    if latency is not None:
        parts.append(f"p50 {latency[0]:.2f}s p90 {latency[1]:.2f}s")
    if in_flight is not None and in_flight[2] is not None and in_flight[1] is not None:
        task, rollout = in_flight[2]
        parts.append(f"oldest in flight: task {task} rollout {rollout}, {in_flight[1]:.0f}s")
    return ", ".join(parts)


def tasks_done(tally: Tally, finished: Finished | None) -> int:
    """The larger of what pytest reported and what the dispatcher finished (see ``progress_line``)."""
    return tally.items if finished is None else max(tally.items, finished[0])


def rate(per_hour: float) -> str:
    """A rate as a person reads it at a glance: per second from one a second up, else per hour,
    in two or three figures (``4.9k/s``, ``12/s``, ``360/h``), never ``17650742/h``."""
    per_second = per_hour / 3600
    return short(per_second) + "/s" if per_second >= 1 else short(per_hour) + "/h"


def short(value: float) -> str:
    """``value`` in two or three figures, with k, M or G for thousands, millions, billions."""
    for suffix in ("", "k", "M"):
        if value < 9.95:
            return f"{value:.1f}{suffix}"
        if value < 999.5:
            return f"{value:.0f}{suffix}"
        value /= 1000
    return f"{value:.0f}G"


def live_redraw(terminal: Any, line: str) -> str:
    """The status line redrawn in place: back to the line's start, the dataset's name pytest wrote
    there, ``line``, and the rest of the old one cleared.

    Cut to the terminal's width (less its last column, where some terminals wrap at once): a
    longer line wraps, ``\r`` goes back only to the start of its last row, and each redraw left
    a stale row behind."""
    start = line_start(terminal)
    return "\r" + start + fit(line, terminal_width(terminal) - len(start)) + CLEAR_TO_END


def terminal_width(terminal: Any) -> int:
    """The columns a line may take: the terminal's less its last, where some terminals wrap at once."""
    return terminal.config.get_terminal_writer().fullwidth - 1


def fit(line: str, width: int) -> str:
    """``line`` within ``width`` columns, cut after its last whole part that fits (parts end before
    ``, `` or a parenthesis: ``1 failed (agent_run_error 1)`` keeps ``1 failed``), not mid-word
    (``4 in fligh``); hard only when not even its first part fits."""
    if len(line) <= width:
        return line
    cut = max(line.rfind(", ", 0, width + 1), line.rfind(" (", 0, width + 1))
    head = line[:cut] if cut > 0 else line[: max(width, 1)]
    if head.count("(") > head.count(")"):  # no parenthesis left open
        head = head[: head.rfind(" (")]
    return head
