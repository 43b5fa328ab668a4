"""How a stop (Ctrl-C, SIGTERM) ends a run: at once while it dispatches, held once it ends.

Job schedulers send SIGTERM and kill a little later: SLURM at a time limit or on preemption,
Kubernetes on eviction, CI systems on cancel. By default it ends pytest on the spot; the
dispatcher still cancels and fsyncs once its pipe closes, but the session never says what
was done. Raised as ``KeyboardInterrupt`` instead, it takes pytest's own interrupted path:
in-flight rollouts cancelled, the rollouts section written, exit 2.

Once the run loop is over, a ``KeyboardInterrupt`` could land anywhere in what every plugin
does to end the session (xdist waiting for its workers to exit, terminal summaries), which
none of them expect: a traceback, no section, pytest killed by the signal. So from then on a
stop is held, and taken where the session can act on it: before or during scoring (which it
cuts short), else as the session's exit status.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOPS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


class StopHandling:
    """Installed while this process dispatches rollouts, or an xdist controller's workers do;
    handlers someone else set are left alone."""

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        # The stop that came while stops were held, or "".
        self.held = ""
        self._interruptible = False

    def install(self) -> None:
        """SIGTERM as Ctrl-C."""
        self._take(signal.SIGTERM, _interrupt)

    def hold(self) -> None:
        """From the end of the run loop: a stop is kept for ``interruptible`` or the exit status."""
        for signum in STOPS:
            self._take(signum, self._hold)

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Work a stop cuts short (scoring): one held already stops it before it starts."""
        if self.held:
            raise KeyboardInterrupt(f"stopped by {self.held}")
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False

    def remove(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._interruptible:
            raise KeyboardInterrupt(f"stopped by {name}")
        self.held = self.held or name

    def _take(self, signum: int, handler: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signum)
        ours = signum in self._previous
        if ours or current in (signal.SIG_DFL, signal.default_int_handler):
            previous = signal.signal(signum, handler)
            self._previous.setdefault(signum, previous)
