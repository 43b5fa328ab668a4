"""When the cyclic garbage collector runs, around work that makes many objects and few cycles.

Its default pace (a pass every 700 net allocations, and full passes as long-lived objects
grow by a quarter) suits programs that make cycles. A run makes objects by the hundred
thousand, keeps many until the end (items, reports) and frees the rest by reference
counting, so at that pace the collector walks the same survivors again and again: at 10k
rollouts 0.4-0.8 s of the dispatcher's CPU, 0.15 s of collection, and at 100k seconds of
pytest's own run loop and scoring. These slow it down while such work runs.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Net allocations between passes over the young generation.
YOUNG_THRESHOLD = 10_000


@contextmanager
def lasting() -> Iterator[None]:
    """For objects that live as long as the session, such as items: no pass while they are
    made (none could free them), and frozen afterwards, out of every later pass."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@contextmanager
def paced() -> Iterator[None]:
    """Passes every ``YOUNG_THRESHOLD`` net allocations while the block runs, as before after it."""
    previous = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def pace_process() -> None:
    """For a process whose state from here on lives as long as it (the dispatcher): frozen, and
    passes every ``YOUNG_THRESHOLD`` net allocations for the rest of its life."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
