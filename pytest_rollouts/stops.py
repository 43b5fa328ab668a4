"""How a stop ends a run in an event loop (the Python API's): a cancellation, which asyncio.run
makes of Ctrl-C and which SIGTERM is made here, that waits for work handed to a thread.

A pytest session stops by ``KeyboardInterrupt`` raised where it runs (``pytest/stopping.py``).
A coroutine stops by being cancelled, at an ``await``; two things would otherwise escape it:

- work in a worker thread (scoring, the report, exports) is not cancelled with the coroutine
  that awaits it, and would go on writing after the run released its output;
- SIGTERM (a scheduler's time limit, a CI cancel) kills the process where it stands, unless
  the loop turns it into the cancellation Ctrl-C is.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def in_thread(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``func`` in a worker thread, so the caller's loop keeps running. Cancelled, this still waits
    for the thread to end (and then raises ``CancelledError``): what ``func`` writes is written
    before the caller lets go of what it holds."""
    work = asyncio.ensure_future(asyncio.to_thread(func, *args, **kwargs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            with suppress(asyncio.CancelledError):  # a second stop waits all the same
                await asyncio.wait([work])
        if not work.cancelled():
            work.exception()  # what it raised is moot now: the run is stopped
        raise


class TermAsInterrupt:
    """While a task of a loop it owns runs: SIGTERM cancels the task, as Ctrl-C does under
    ``asyncio.run``. A SIGTERM handler someone else set is left alone, and only the main thread
    can take a signal."""

    def __init__(self) -> None:
        # Whether SIGTERM came while it was taken.
        self.received = False

    @contextmanager
    def taken(self, task: asyncio.Task[object]) -> Iterator[None]:
        loop = task.get_loop()
        ours = threading.current_thread() is threading.main_thread()
        if not ours or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
            yield
            return
        loop.add_signal_handler(signal.SIGTERM, self._stop, task)
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    def _stop(self, task: asyncio.Task[object]) -> None:
        self.received = True
        task.cancel()
