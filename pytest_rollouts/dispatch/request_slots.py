"""The run's bound on requests in flight, with rollouts not yet started queued as positions.

The dispatcher admits rollouts far ahead of the requests it may send (``8 x parallel`` by
default, so that pytest finds its next task done). Started as tasks, every admitted rollout
beyond ``parallel`` would run up to a semaphore, park there and be woken later: a future, a
callback and a task step more per rollout, for nothing. Here an admitted rollout waits as a plain
position, and its task starts only when a slot frees, holding that slot from its first step.

A rollout already started that needs a slot again (a retry after its backoff, or a try that gave
its slot back while its agent's adaptive limit had no room) waits on a future, and goes ahead of
the positions not started: it was admitted first.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class RequestSlots:
    """At most ``size`` slots held; ``start(position)`` is called with a slot already held for it."""

    def __init__(self, size: int, start: Callable[[int], None] | None = None) -> None:
        self._free = size
        self._start = start
        self._queued: deque[int] = deque()
        # Positions pytest waits on (claimed): ahead of the look-ahead's.
        self._claimed: deque[int] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()

    def admit(self, position: int, *, first: bool = False) -> None:
        """Start ``position`` now if a slot is free, else once one is; ``first``: ahead of every
        position queued (pytest waits on it), though still behind rollouts already started."""
        if self._free:  # a free slot means nothing waits for one
            self._free -= 1
            assert self._start is not None
            self._start(position)
        elif first:
            self._claimed.append(position)
        else:
            self._queued.append(position)

    async def acquire(self) -> None:
        if self._free:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot, then cancelled: pass it on
                self.release()
            elif waiter in self._waiters:  # still queued (a release may have passed over it already)
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """A slot given back: to the oldest waiting try, else to the next position claimed, else queued."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        queued = self._claimed or self._queued
        if queued:
            assert self._start is not None
            self._start(queued.popleft())
            return
        self._free += 1
