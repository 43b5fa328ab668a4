"""A plan's agents as its requests reach them: each one's ``/run`` target and headers, and their health.

Read once from the ``PlanHeader``, for the dispatcher process and in-process dispatch alike:
credentials in an agent's URL become a header like the ones given for it, and every such value
is kept out of what is written or shown (``Redactor``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_rollouts.dispatch.client import JSON_HEADERS
from pytest_rollouts.dispatch.health import Unhealthy, check_agents
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.net.address import Address
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import Pool, Target

# A shorter --rollouts-timeout ends the attempt first (TimeoutError, not retried), as with aiohttp.
CONNECT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class PlanAgents:
    header: PlanHeader
    # By agent name: the plan's headers for it, and those its URL's credentials make.
    headers: dict[str, dict[str, str]]
    # Indexed as ``header.agents`` (the plan's ``agent`` column).
    targets: list[Target]
    redact: Redactor

    @classmethod
    def of(cls, header: PlanHeader) -> PlanAgents:
        headers = {
            name: Address.parse(header.urls[name]).with_credentials(header.headers.get(name, {}))
            for name in header.agents
        }
        targets = [
            Target.of("POST", header.urls[name], "/run", {**JSON_HEADERS, **headers[name]}) for name in header.agents
        ]
        return cls(header, headers, targets, Redactor(headers))

    async def unhealthy(self, pool: Pool) -> list[Unhealthy]:
        """The agents that fail the plan's health checks (none when it asks for none)."""
        health = self.header.health
        if health is None:
            return []
        return await check_agents(
            pool,
            {name: self.header.urls[name] for name in self.header.agents},
            self.headers,
            workers=health.workers,
            ignored=frozenset(health.ignored),
            redact=self.redact,
        )
