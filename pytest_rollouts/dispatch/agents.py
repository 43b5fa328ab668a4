"""A plan's agents as its requests reach them: each one's ``/run`` target and headers, and their health.

Read once from the ``PlanHeader``, for the dispatcher process and in-process dispatch alike:
credentials in an agent's URL become a header like the ones given for it, and every such value
is kept out of what is written or shown (``Redactor``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from pytest_rollouts.datatype import datatype
from pytest_rollouts.dispatch.client import JSON_HEADERS, Attempt, post_run
from pytest_rollouts.dispatch.health import Unhealthy, check_agents
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.dispatch.request_timeouts import RequestTimeouts
from pytest_rollouts.model.spec import model_headers
from pytest_rollouts.net.address import Address
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import Pool, Target

# One attempt at a rollout: its request body in, what came of it out.
Sender = Callable[[bytes], Awaitable[Attempt]]

# A shorter --rollouts-timeout ends the attempt first (TimeoutError, not retried), as with aiohttp.
CONNECT_TIMEOUT_S = 30.0


@datatype(frozen=True, slots=True)
class PlanAgents:
    header: PlanHeader
    # By agent name: the plan's headers for it, and those its URL's credentials make.
    headers: dict[str, dict[str, str]]
    redact: Redactor

    @classmethod
    def of(cls, header: PlanHeader) -> PlanAgents:
        """A model agent's headers carry its API key, so the redaction covers the key as well."""
        headers = {}
        for name in header.agents:
            given = header.headers.get(name, {})
            if name in header.models:
                given = {**given, **model_headers(header.models[name])}
            headers[name] = Address.parse(header.urls[name]).with_credentials(given)
        return cls(header, headers, Redactor(headers))

    def senders(self, pool: Pool) -> list[Sender]:
        """Each agent's attempts, indexed as ``header.agents`` (the plan's ``agent`` column): a ``/run``
        posted, or a model agent's rollout run here (``model_runs``)."""
        h = self.header
        runs = self._model_runs(pool) if h.models else {}
        timeouts = RequestTimeouts(h.timeout)
        return [
            runs[name]
            if name in runs
            else partial(
                post_run,
                pool,
                Target.of("POST", h.urls[name], "/run", {**JSON_HEADERS, **self.headers[name]}),
                timeouts=timeouts,
                redact=self.redact,
            )
            for name in h.agents
        ]

    def _model_runs(self, pool: Pool) -> dict[str, Sender]:
        """The model agents' rollouts, run here; their machinery is imported only for a plan with one."""
        from pytest_rollouts.dispatch.model_runs import model_runs
        from pytest_rollouts.model.cache import ResponseCache
        from pytest_rollouts.model.calls import CallBounds

        h = self.header
        bounds = CallBounds(h.model_timeout, h.retries, h.retry_backoff)
        cache = ResponseCache(Path(h.cache)) if h.cache else None
        return model_runs(h.models, self.headers, pool, bounds, h.model_parallel, h.timeout, self.redact, cache)

    async def unhealthy_lines(self) -> list[str]:
        """``unhealthy`` on a pool of its own, one line per agent: what a refusal shows. Nothing of
        a dispatch (attempts, model agents) is needed for it, nor imported."""
        pool = Pool(connect_timeout=CONNECT_TIMEOUT_S)
        try:
            return [agent.line() for agent in await self.unhealthy(pool)]
        finally:
            pool.close()

    async def unhealthy(self, pool: Pool) -> list[Unhealthy]:
        """The agents that fail the plan's health checks (none when it asks for none)."""
        health = self.header.health
        if health is None:
            return []
        return await check_agents(
            pool,
            # A model agent has no /health of its own: its first rollout says whether the model answers.
            {name: self.header.urls[name] for name in self.header.agents if name not in self.header.models},
            self.headers,
            workers=health.workers,
            ignored=frozenset(health.ignored),
            redact=self.redact,
        )
