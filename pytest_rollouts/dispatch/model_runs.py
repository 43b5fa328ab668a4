"""A model agent's rollouts where a ``/run`` would be posted: in the dispatcher, with no HTTP hop.

The agent (``model/agent.py``) answers as a ``/run`` would, and this turns its answer into the
``Attempt`` that ``post_run`` returns, so what follows a reply (failure classes, rows, resume,
metrics) is the same code for both kinds of agent. The rollout's time limit is
``--rollouts-timeout``, as for a ``/run``.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from typing import Any

from pytest_rollouts.dispatch.client import Attempt, Failure
from pytest_rollouts.model.agent import ModelAgent
from pytest_rollouts.model.cache import ResponseCache
from pytest_rollouts.model.calls import CallBounds, ModelClient
from pytest_rollouts.model.loading import load_named
from pytest_rollouts.model.spec import ModelPlan
from pytest_rollouts.model.tools import Toolbox
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import Pool
from pytest_rollouts.rows.schema import AGENT_REQUEST_FAILED, AGENT_RUN_ERROR, MAX_BODY_CHARS
from pytest_rollouts.store.jsonl import loads


class ModelRuns:
    """One model agent's rollouts, each one ``Attempt`` as ``post_run`` would return it."""

    def __init__(self, agent: ModelAgent, timeout: float) -> None:
        self._agent = agent
        self._timeout = timeout

    async def __call__(self, body: bytes) -> Attempt:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout):
                outcome = await self._agent.run(loads(body))
        except TimeoutError:
            failure = Failure(AGENT_REQUEST_FAILED, "TimeoutError", f"the rollout took longer than {self._timeout:g}s")
            return Attempt(None, failure, time.perf_counter() - started)
        except Exception as exc:  # a reply the agent could not follow: this rollout broke, not the run
            tail = traceback.format_exc()[-MAX_BODY_CHARS:]
            failure = Failure(AGENT_RUN_ERROR, type(exc).__name__, f"the model agent failed: {exc!r}", None, tail)
            return Attempt(None, failure, time.perf_counter() - started)
        elapsed = time.perf_counter() - started
        if isinstance(outcome, Failure):
            return Attempt(None, outcome, elapsed, outcome.http_status)
        return Attempt(outcome, None, elapsed)


def model_runs(
    plans: dict[str, ModelPlan],
    headers: dict[str, dict[str, str]],
    pool: Pool,
    bounds: CallBounds,
    parallel: int,
    rollout_timeout: float,
    redact: Redactor,
    cache: ResponseCache | None = None,
) -> dict[str, Callable[[bytes], Any]]:
    """Each model agent's rollouts by name, sharing ``parallel`` model calls in flight (and ``cache``)."""
    in_flight = asyncio.Semaphore(parallel)
    runs: dict[str, Callable[[bytes], Any]] = {}
    for name, plan in plans.items():
        client = ModelClient(plan, pool, headers[name], bounds, in_flight, redact)
        tools = Toolbox(list(load_named(plan.tools))) if plan.tools else None  # type: ignore[call-overload]
        verifier = load_named(plan.verifier)
        agent = ModelAgent(plan, client, verifier, tools, redact, cache)  # type: ignore[arg-type]
        runs[name] = ModelRuns(agent, rollout_timeout)
    return runs
