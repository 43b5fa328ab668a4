"""Which servers a NeMo Gym head server's config pairs, checked on every row before any request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from functools import cached_property
from typing import Any

from pytest_rollouts.datatype import datatype


class PairingError(ValueError):
    """A row that crosses a pairing; the router adds its file and line."""


@datatype
class Pairings:
    """Which servers a NeMo Gym config pairs, so a row sent across a pairing is refused before any
    request (NeMo Gym's ``_validate_agent_pairings``, ``_validate_environment_servers``): an agent
    verifies against the one resources server it fronts, and an environment server runs its rows
    on the one agent its ``agent_server`` names. A row that crosses them would be scored by a
    verifier that does not know its task, with no error anywhere."""

    resources_servers: frozenset[str] = frozenset()
    # Agent to the resources server it fronts (its ``resources_server.name``).
    fronts: Mapping[str, str] = field(default_factory=dict)
    # Environment server to the agent its ``agent_server`` names.
    runs_on: Mapping[str, str] = field(default_factory=dict)

    def in_front_of(self, agent: str) -> list[str]:
        """The environment servers whose ``agent_server`` is ``agent`` (NeMo Gym's
        ``_environment_servers_by_agent``), sorted."""
        return list(self._servers_by_agent.get(agent, ()))

    @cached_property
    def _servers_by_agent(self) -> dict[str, tuple[str, ...]]:
        """Worked out once: routing asks for every row."""
        by_agent: dict[str, list[str]] = {}
        for server, runs_on in sorted(self.runs_on.items()):
            by_agent.setdefault(runs_on, []).append(server)
        return {agent: tuple(servers) for agent, servers in by_agent.items()}

    def check(self, row: Mapping[str, Any], agents: tuple[str, ...], dataset_server: str | None) -> None:
        """``PairingError`` when ``row``, routed to ``agents``, crosses a pairing. ``dataset_server``:
        the resources server of the row's file (listing it, or fronted by the agent listing it)."""
        if not self.runs_on and not self.fronts:
            return  # no head server's pairings (most runs): nothing a row could cross
        named = _agent_named(row)
        source = row.get("task_source")
        for target in agents:
            runs_on = self.runs_on.get(target)
            if runs_on is not None and named == target:
                raise PairingError(
                    f"row names environment server {target!r} as its agent: name the agent it runs rows on "
                    f"({runs_on!r}), which routes the row through it"
                )
            if runs_on is not None and named is not None and named != runs_on:
                raise PairingError(
                    f"row names agent {named!r}, but environment server {target!r} runs its rows on agent "
                    f"{runs_on!r} (its agent_server)"
                )
            agent = runs_on or target  # a server's rows are verified by its agent's resources server
            fronted = self.fronts.get(agent)
            if fronted is None:
                continue
            for server, said in ((source, "the row's task_source is"), (dataset_server, "its dataset file belongs to")):
                if server in self.resources_servers and server != fronted:
                    via = f" (behind environment server {target!r})" if agent != target else ""
                    raise PairingError(
                        f"agent {agent!r}{via} fronts resources server {fronted!r}, but {said} resources server "
                        f"{server!r}: its verifier would score tasks it does not know"
                    )


def _agent_named(row: Mapping[str, Any]) -> str | None:
    ref = row.get("agent_ref")
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) and name else None
