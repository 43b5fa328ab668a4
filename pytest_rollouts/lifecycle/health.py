"""The agents' health checks before a run moves anything: every door asks them here, from the
process that prepares the files, so a refusal (or a stop, even ``kill -9``, during a slow check)
finds earlier results where they were."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextlib import suppress

from pytest_rollouts.config.settings import Settings
from pytest_rollouts.dispatch.agents import CONNECT_TIMEOUT_S, PlanAgents
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.net.http1 import Pool


async def unhealthy(settings: Settings, urls: Mapping[str, str]) -> list[str]:
    """One line per agent of ``urls`` that fails its ``/health`` (none with ``no_health_check``).
    ``urls``: the agents to ask, model agents left out (a model has no ``/health``).

    The plan's agents ask (their headers, their redaction), on a pool of their own: nothing of a
    dispatch (attempts, model agents) is needed for it, nor imported."""
    if settings.no_health_check or not urls:
        return []
    header = PlanHeader.of(settings, dict(urls), parallel=settings.parallel, limit=1)
    agents = PlanAgents.of(header)
    pool = Pool(connect_timeout=CONNECT_TIMEOUT_S)
    try:
        return [agent.line() for agent in await agents.unhealthy(pool)]
    finally:
        pool.close()


def unhealthy_blocking(settings: Settings, urls: Mapping[str, str]) -> list[str]:
    """``unhealthy`` from synchronous code (a pytest session), on an event loop of its own that is
    never made the thread's current one, so a test's own loop (pytest-asyncio's) is left alone."""
    if settings.no_health_check or not urls:
        return []
    loop = asyncio.new_event_loop()
    checks = loop.create_task(unhealthy(settings, urls))
    try:
        return loop.run_until_complete(checks)
    except BaseException:  # a stop (Ctrl-C, SIGTERM as one): the checks end, their pool closed, on their loop
        checks.cancel()
        with suppress(BaseException):
            loop.run_until_complete(checks)
        raise
    finally:
        loop.close()
