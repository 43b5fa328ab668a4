"""Every request's timeout from one timer: each still runs out its own ``seconds`` after it began."""

from __future__ import annotations

import asyncio
import time

import pytest

from pytest_rollouts.dispatch.request_timeouts import RequestTimeouts

# A timer may run up to a millisecond early (``request_timeouts.EARLY_S``); nothing here is that fine.
SLACK_S = 2e-3


async def request(
    timeouts: RequestTimeouts, lasts: float, log: dict[str, tuple[float, float, bool]], name: str
) -> None:
    """A request of ``lasts`` seconds, logged as (began, ended, ran out) by the loop's clock."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    task = timeouts.begin()
    try:
        await asyncio.sleep(lasts)
    except asyncio.CancelledError:
        if not timeouts.end(task):
            raise
        log[name] = (began, loop.time(), True)
        return
    finally:
        timeouts.end(task)
    log[name] = (began, loop.time(), False)


@pytest.mark.asyncio
async def test_each_request_runs_out_its_own_seconds_after_it_began_not_the_oldest_ones() -> None:
    timeouts, log = RequestTimeouts(0.6), {}
    first = asyncio.create_task(request(timeouts, 10, log, "first"))
    await asyncio.sleep(0.3)
    second = asyncio.create_task(request(timeouts, 10, log, "second"))
    quick = asyncio.create_task(request(timeouts, 0.01, log, "quick"))
    await asyncio.gather(first, second, quick)
    for name in ("first", "second"):
        began, ended, ran_out = log[name]
        assert ran_out and ended - began >= 0.6 - SLACK_S, name
    assert log["second"][1] > log["first"][1]
    assert log["quick"][2] is False


@pytest.mark.asyncio
async def test_the_timer_is_set_again_after_the_oldest_request_ended_in_time() -> None:
    """The one timer was set for a request that ended while the next one ran: that one still runs
    out, on time."""
    timeouts, log = RequestTimeouts(0.6), {}
    early = asyncio.create_task(request(timeouts, 0.4, log, "early"))
    await asyncio.sleep(0.3)
    late = asyncio.create_task(request(timeouts, 10, log, "late"))
    await asyncio.gather(early, late)
    began, ended, ran_out = log["late"]
    assert log["early"][2] is False and ran_out and ended - began >= 0.6 - SLACK_S


@pytest.mark.asyncio
async def test_a_cancel_from_elsewhere_is_not_taken_for_a_timeout() -> None:
    timeouts, log = RequestTimeouts(5), {}
    task = asyncio.create_task(request(timeouts, 10, log, "stopped"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "stopped" not in log and task.cancelling() == 1


@pytest.mark.asyncio
async def test_a_cancel_that_comes_with_the_timeout_is_still_a_cancel() -> None:
    """Stopped (Ctrl-C) in the same turn of the loop as it ran out: the stop wins, as under ``asyncio.timeout``."""
    timeouts, log = RequestTimeouts(0.05), {}
    task = asyncio.create_task(request(timeouts, 10, log, "both"))
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    loop.call_at(loop.time() + 0.05 + SLACK_S, task.cancel)  # just after the timeout's timer
    time.sleep(0.06 + 2 * SLACK_S)  # the loop is held past both: they run in one turn, the timer first
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "both" not in log


@pytest.mark.asyncio
async def test_a_request_of_a_task_cancelled_before_still_times_out() -> None:
    """A task that kept going after a cancel (a reply's row is written even then) counts it before
    the request: its timeout is still a timeout."""
    timeouts, log = RequestTimeouts(0.05), {}

    async def after_a_cancel() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass
        await request(timeouts, 10, log, "late")

    task = asyncio.create_task(after_a_cancel())
    await asyncio.sleep(0)
    task.cancel()
    await task
    assert log["late"][2] is True
