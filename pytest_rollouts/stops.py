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
import contextvars
import functools
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
    before the caller lets go of what it holds.

    The thread's future is the executor's, not a task: ``asyncio.run`` cancels every task of its
    loop on a second Ctrl-C (``asyncio.to_thread`` makes one), which ended the wait while the thread
    still ran, and the run let go of its output before the thread wrote its metrics file there."""
    loop = asyncio.get_running_loop()
    work = loop.run_in_executor(None, functools.partial(contextvars.copy_context().run, func, *args, **kwargs))
    try:
        return await asyncio.shield(work)
    except (asyncio.CancelledError, KeyboardInterrupt) as stop:
        # A second Ctrl-C is no cancellation: asyncio.run raises KeyboardInterrupt where the loop is,
        # this frame included. Either waits all the same, and the stop is a cancellation from here.
        while not work.done():
            with suppress(asyncio.CancelledError, KeyboardInterrupt):
                await asyncio.wait([work])
        if not work.cancelled():
            work.exception()  # what it raised is moot now: the run is stopped
        raise asyncio.CancelledError() from stop


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
