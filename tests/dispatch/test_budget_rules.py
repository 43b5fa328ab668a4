"""The rules of the retry budget and of an adaptive limit, on a clock the test moves."""

from __future__ import annotations

import asyncio

import pytest

from pytest_rollouts.dispatch.concurrency import START, AdaptiveLimit
from pytest_rollouts.dispatch.retry_budget import FLOOR_PER_S, WINDOW_S, RetryBudget


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def allowed(budget: RetryBudget, asked: int) -> int:
    return sum(budget.allow() for _ in range(asked))


def test_retries_are_a_fraction_of_recent_first_tries_plus_a_floor() -> None:
    clock = Clock()
    budget = RetryBudget(0.1, clock)
    for _ in range(1000):
        budget.sent(clock.now)
    assert allowed(budget, 1000) == 100 + FLOOR_PER_S * WINDOW_S


def test_the_window_slides_so_an_outage_that_ends_gets_its_retries_back() -> None:
    clock = Clock()
    budget = RetryBudget(0.0, clock)
    assert allowed(budget, 500) == FLOOR_PER_S * WINDOW_S
    clock.now += WINDOW_S - 1  # still within the window: nothing new
    assert allowed(budget, 10) == 0
    clock.now += 1  # the first second's retries have left it
    assert allowed(budget, 500) == FLOOR_PER_S * WINDOW_S


@pytest.mark.asyncio
async def test_a_burst_of_overloads_sent_under_one_limit_halves_it_once() -> None:
    limit = AdaptiveLimit("a", 64, 0.0)
    for _ in range(START):
        await limit.acquire()
    sent = -1.0  # all four were sent before any cut
    limit.release(sent, 0.01, overloaded=True)
    assert int(limit.limit) == START // 2
    for _ in range(START - 1):
        limit.release(sent, 0.01, overloaded=True)
    assert int(limit.limit) == START // 2


@pytest.mark.asyncio
async def test_the_limit_grows_in_use_and_stops_at_its_ceiling() -> None:
    limit, held = AdaptiveLimit("a", 6, 0.0), 0
    for _ in range(50):
        while held < int(limit.limit):
            await limit.acquire()
            held += 1
        limit.release(0.0, 0.01, overloaded=False)
        held -= 1
    assert int(limit.limit) == 6
    assert [point[1] for point in limit.points] == [4, 5, 6]


@pytest.mark.asyncio
async def test_a_waiter_gets_the_room_a_release_makes() -> None:
    limit = AdaptiveLimit("a", 1, 0.0)
    await limit.acquire()
    waiting = asyncio.ensure_future(limit.acquire())
    await asyncio.sleep(0)
    assert not waiting.done()
    limit.release(None, 0.0, overloaded=False)  # never sent: frees room, adapts nothing
    await asyncio.wait_for(waiting, 1)
    assert int(limit.limit) == 1
