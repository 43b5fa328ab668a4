"""SIGTERM stops a run the way Ctrl-C does.

Job schedulers send SIGTERM and kill a little later: SLURM at a time limit or on preemption,
Kubernetes on eviction, CI systems on cancel. By default it ends pytest on the spot; the
dispatcher still cancels and fsyncs once its pipe closes, but the session never says what
was done. Raised as ``KeyboardInterrupt`` instead, it takes pytest's own interrupted path:
in-flight rollouts cancelled, the rollouts section written, exit 2.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


class TermAsInterrupt:
    """Installed while this process dispatches rollouts, or an xdist controller's workers do; a
    handler someone else set is left alone."""

    def __init__(self) -> None:
        self._previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._previous = signal.signal(signal.SIGTERM, _interrupt)

    def remove(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
