"""A run's live status file, kept by a thread of its own: every few seconds, and once at the end.

Each door knows its counts in its own way (the dispatcher process's reports in one pytest process,
the workers' reports on an xdist controller, the event loop's own dispatch in the Python API); each
gives a ``source`` that says them now. A thread writes, so the file keeps its pace whatever the door's
main thread is doing (an xdist controller hears nothing while every worker waits on a slow rollout);
a source therefore reads only values replaced whole (a tuple, a dict built once), never one being
changed in place.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_rollouts.datatype import datatype
from pytest_rollouts.store.status import (
    FAILED,
    FINISHED,
    RUNNING,
    STOPPED,
    OldestInFlight,
    RunStatus,
    status_path,
    write_status,
)

if TYPE_CHECKING:
    from pytest_rollouts.config.settings import Settings

# The rate is over this much of the recent past: a run that slows shows it within a minute.
RATE_WINDOW_S = 60.0


@datatype
class Counts:
    """What a door knows of its dispatch at one moment (``at``, ``time.monotonic``)."""

    total: int
    done: int
    failed: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    # The oldest request's age at ``at``, its task and rollout.
    oldest: tuple[float, int, int] | None = None
    at: float = field(default_factory=time.monotonic)
    # Each agent's adaptive limit now; none under a fixed ``parallel`` (``concurrency_limit`` then).
    limits: dict[str, int] = field(default_factory=dict)

    def oldest_now(self, now: float) -> OldestInFlight | None:
        if self.oldest is None:
            return None
        age, task, rollout = self.oldest
        return OldestInFlight(round(age + now - self.at, 3), task, rollout)


def ended_by(error: BaseException | None, *, dispatch_stopped: bool = False) -> str:
    """The state a run ended in: stopped by the user (Ctrl-C, SIGTERM, a cancel), failed (an error,
    or dispatch stopped before the end of the plan), else finished."""
    if error is not None and not isinstance(error, Exception):  # KeyboardInterrupt, a task's CancelledError
        return STOPPED
    return FAILED if error is not None or dispatch_stopped else FINISHED


def concurrency_limit(settings: Settings) -> int:
    """The concurrency limit a fixed ``parallel`` keeps, for the whole run however many xdist workers
    share it; under ``auto:MAX`` the ceiling, said only until the first count brings the agents'
    live limits (``Counts.limits``, which the status sums)."""
    return settings.parallel


class StatusWriter:
    """Writes ``<out>.status.json`` every ``interval`` seconds from ``source`` (None: nothing known
    yet), and once more at ``stop`` with the state the run ended in."""

    def __init__(
        self,
        out: Path,
        interval: float,
        limit: Callable[[], int],
        source: Callable[[], Counts | None],
        total: int = 0,
    ) -> None:
        self.path = status_path(out)
        self._out = str(out)
        self._interval = interval
        self._limit = limit
        self._source = source
        self._started_at = time.time()
        # ``total``: the rollouts to dispatch, when known before the first count (not on an xdist controller).
        self._last = Counts(total, 0)
        # (time.monotonic, done) at each write within the rate's window.
        self._samples: deque[tuple[float, int]] = deque()
        self._stopping = threading.Event()
        # Held for each write: the last one is ``stop``'s, whenever the thread wakes.
        self._writing = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="rollouts-status", daemon=True)

    def start(self) -> StatusWriter:
        self._try(RUNNING)
        self._thread.start()
        return self

    @property
    def last(self) -> Counts:
        """The counts last written."""
        return self._last

    def stop(self, state: str, final: Counts | None = None) -> None:
        """The last write: ``state`` (finished, stopped, failed) and the final counts, nothing in flight.

        Not waiting for the thread to end: woken, it finds the run stopped and writes nothing more.
        A join would wait at the end of every session for the thread to be scheduled, while the
        dispatcher process exits on the other core."""
        with self._writing:
            self._stopping.set()
            # The limits dispatch ended with: the final counts' or, when they do not say them, the last seen.
            limits = (final.limits if final is not None else {}) or self._last.limits
            if final is not None:
                self._last = final
            last = self._last
            self._last = Counts(last.total, last.done, last.failed, limits=limits)
            self._try(state)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            with self._writing:
                if not self._stopping.is_set():
                    self._try(RUNNING)

    def _try(self, state: str) -> None:
        """A write that fails (a full disk, a removed folder) is skipped: the run's own files say
        what went wrong, and a view must not end the run it shows."""
        try:
            self._write(state)
        except OSError:
            pass

    def _write(self, state: str) -> None:
        counts = self._source() if state == RUNNING else None
        if counts is not None:
            self._last = counts
        counts, now = self._last, time.monotonic()
        rate = self._rate(now, counts.done)
        remaining = max(counts.total - counts.done, 0)
        status = RunStatus(
            state=state,
            out=self._out,
            pid=os.getpid(),
            host=socket.gethostname(),
            started_at=self._started_at,
            updated_at=time.time(),
            interval_s=self._interval,
            total=counts.total,
            done=counts.done,
            failed=dict(counts.failed),
            in_flight=counts.in_flight,
            oldest_in_flight=counts.oldest_now(now),
            limit=sum(counts.limits.values()) if counts.limits else self._limit(),
            limits=dict(counts.limits),
            rate_per_s=rate,
            eta_s=None if not rate or state != RUNNING else round(remaining / rate, 1),
        )
        write_status(self.path, status)

    def _rate(self, now: float, done: int) -> float | None:
        """Rollouts done per second since the oldest write within the window; None before a second write."""
        samples = self._samples
        samples.append((now, done))
        while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW_S:
            samples.popleft()
        then, done_then = samples[0]
        return round((done - done_then) / (now - then), 3) if now > then and len(samples) > 1 else None
