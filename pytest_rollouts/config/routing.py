"""Which agent serves a row, decided before any request is sent.

A row picks its agent with ``agent_ref.name``, its ``task_source``, or its taskset; a row without
one goes to its suite's default agent; the run's map and fan-out replace a key's agent, and the
environment routing mode sends flat rows to environment servers. Where each agent answers is the
registry's (``config/registry.py``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pytest_rollouts.config.pairings import PairingError, Pairings
from pytest_rollouts.config.settings import DEFAULT_KEY
from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.episodes import taskset_of


class RoutingError(ValueError):
    """An agent that cannot be resolved; raised before any dispatch."""


class RowRefused(RoutingError):
    """A row the run's configuration refuses, though it could route it: a pairing the row crosses, a
    flat row under environment routing mode ``taskset``. The options and the data disagree: a usage
    error, not a broken file."""


@datatype
class Discovered:
    """What a NeMo Gym head server's config says: agent (and environment server) addresses, and
    the agent of each task source."""

    agents: Mapping[str, str]
    task_sources: Mapping[str, str]
    # Its dataset entries (``jsonl_fpath``, ``type``, ``prompt_config``): a dataset's split and prompt.
    datasets: tuple[HeadDataset, ...] = ()
    pairings: Pairings = field(default_factory=Pairings)
    # Its top-level collection keys, by the option each defaults (``headserver.RUN_KEYS``).
    options: Mapping[str, Any] = field(default_factory=dict)
    # Its ``environment_server_routes``: the environment server of each taskset.
    tasksets: Mapping[str, str] = field(default_factory=dict)
    # Each environment server's type (its key under ``environment_servers:``), by server name.
    result_types: Mapping[str, str] = field(default_factory=dict)


@datatype(frozen=True)
class HeadDataset:
    """One dataset entry of a head server's config, as NeMo Gym declares it: its file (relative to
    where the run starts), its type (a split, or ``example``) and its prompt template, if any."""

    name: str
    jsonl_fpath: str
    split: str | None
    prompt_config: str | None
    # The resources server that verifies its rows: the one listing it, or the one its listing agent fronts.
    server: str | None = None


@datatype
class Routing:
    """How rows of one dataset file find their agents, with NeMo Gym's precedence.

    A row is keyed by its taskset (an episode row), else its ``agent_ref.name``, else its
    ``task_source``, else ``_default``. A taskset routes to an environment server through
    the suite's ``[tasksets]``, or to the endpoint of the same name.
    ``fan_out`` and ``agent_map`` (never both for one key: settings refuse that) replace
    that key's agent; otherwise a task source resolves through the suite's
    ``[task_sources]`` (or the head server's config), and ``_default`` goes to the
    suite's default agent.
    """

    default: str | None
    # None: any name goes (rows prepared ahead of a run, whose agents are checked when it starts).
    known: frozenset[str] | None
    source: str
    task_sources: Mapping[str, str] = field(default_factory=dict)
    tasksets: Mapping[str, str] = field(default_factory=dict)
    agent_map: Mapping[str, str] = field(default_factory=dict)
    fan_out: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The map and fan-out keys some row matched, shared run-wide: one that none matched is a typo.
    used: set[str] = field(default_factory=set)
    # How the run is given a default agent, and how it names its map option, in its front door's words.
    agent_hint: str = "--rollouts-agent URL"
    map_option: str = "--rollouts-agent-map"
    fan_out_option: str = "--rollouts-fan-out"
    # The suite's ``keywords``: row fields whose values -k matches on the row's items.
    keywords: tuple[str, ...] = ()
    # The head server's pairings, and the resources server that verifies this file's rows, if one is listed.
    pairings: Pairings = field(default_factory=Pairings)
    dataset_server: str | None = None
    # NeMo Gym's ``environment_routing_mode`` for flat rows, and legacy mode's ``environment_server_name``.
    mode: str = "agent"
    environment_server: str | None = None
    # Agents given an address on the command line: their rows go to them, whatever server fronts them.
    direct: frozenset[str] = frozenset()

    def _typo_hint(self, key: str) -> str:
        """A map or fan-out key no row matched that is near ``key``: the typo that left this row unrouted."""
        unused = sorted((set(self.agent_map) | set(self.fan_out)) - self.used - {key})
        near = difflib.get_close_matches(key, unused, n=1)
        if not near:
            return ""
        option = self.fan_out_option if near[0] in self.fan_out else self.map_option
        return f"; {option} key {near[0]!r} matches no row: did you mean {key!r}?"

    def _default_hint(self) -> str:
        """With named agents only (``--rollouts-agent gpt=URL``), the way to send them rows that name none."""
        if not self.known:
            return ""
        named = ", ".join(sorted(self.known))
        return f", or send them to one agent with {self.map_option} {DEFAULT_KEY}=NAME; agents: {named}"

    def agents_for(self, row: dict[str, Any]) -> tuple[str, ...]:
        key, kind = routing_key(row)
        if kind != "taskset" and self.mode != "agent":
            return self._environment_route(row)
        unrouted = key not in self.fan_out and key not in self.agent_map
        if kind == "default" and unrouted and self.default is not None:
            # The default agent's rows map and fan out under its name too, as if they named it.
            key, kind = self.default, "agent"
        if key in self.fan_out:
            agents = self.fan_out[key]
            self.used.add(key)
        elif key in self.agent_map:
            agents = (self.agent_map[key],)
            self.used.add(key)
        elif kind == "taskset":
            agents = (self.tasksets.get(key, key),)
            if self.known is not None and agents[0] not in self.known and key in self.tasksets:
                known = ", ".join(sorted(self.known)) or "none"
                raise RoutingError(
                    f"taskset {key!r} routes to environment server {agents[0]!r}, which is unknown (known: {known})"
                )
            if self.known is not None and agents[0] not in self.known:
                raise RoutingError(
                    f"no environment server route is configured for taskset {key!r} (declare it under "
                    f"[tasksets] in {self.source}, or map it with {self.map_option} {key}=SERVER)"
                    + self._typo_hint(key)
                )
        elif kind == "task_source":
            if key not in self.task_sources:
                raise RoutingError(
                    f"row's task_source {key!r} names no agent (declare it under [task_sources] in "
                    f"{self.source}, or map it with {self.map_option} {key}=AGENT)" + self._typo_hint(key)
                )
            agents = (self.task_sources[key],)
        elif kind == "default":
            if self.default is None:
                raise RoutingError(
                    "row has no agent_ref and no default agent is set "
                    f"(pass {self.agent_hint} or declare 'agent' in {self.source}"
                    f"{self._default_hint()})"
                )
            agents = (self.default,)
        else:
            agents = (key,)
        for name in agents:
            if self.known is not None and name not in self.known:
                known = ", ".join(sorted(self.known)) or "none"
                via = f" (routed from {key!r})" if name != key else ""
                raise RoutingError(
                    f"row names unknown agent {name!r}{via} (known agents: {known})" + self._typo_hint(key)
                )
        self._check_pairings(row, agents)
        if kind == "taskset" or not self.pairings.runs_on:  # no environment server fronts any agent
            return agents
        return tuple(map(self._through_server, agents))

    def _through_server(self, agent: str) -> str:
        """Where a flat row routed to ``agent`` is sent: the one environment server in front of it
        (NeMo Gym's ``_environment_server_for_agent``), which runs it on the agent, else the agent;
        the agent itself when the command line gives its address (``--rollouts-agent NAME=URL``)."""
        servers = [] if agent in self.direct else self.pairings.in_front_of(agent)
        if len(servers) > 1:
            raise RoutingError(
                f"agent {agent!r} is behind several environment servers ({', '.join(servers)}), and a row routed "
                "by its agent cannot choose one: send every flat row to one with environment routing mode "
                "'legacy' and its environment server name"
            )
        return servers[0] if servers else agent

    def counted_as(self, target: str, episode: bool) -> tuple[str, ...]:
        """The names per-agent repeat counts know a row sent to ``target`` by, first match wins: for a
        flat row sent through an environment server, the agent it runs on (NeMo Gym counts repeats
        by agent), then the server; else ``target`` itself."""
        agent = None if episode else self.pairings.runs_on.get(target)
        return (target,) if agent is None else (agent, target)

    def _check_pairings(self, row: dict[str, Any], agents: tuple[str, ...]) -> None:
        try:
            self.pairings.check(row, agents, self.dataset_server)
        except PairingError as exc:
            raise RowRefused(str(exc)) from None

    def _environment_route(self, row: dict[str, Any]) -> tuple[str, ...]:
        """A flat row under ``legacy`` (every one to the named environment server) or ``taskset`` (refused:
        a native-only run must not pick up legacy input in silence), as NeMo Gym's
        ``_environment_server_for_config_row`` routes it."""
        if self.mode == "taskset":
            raise RowRefused(
                "a flat row (no task_id.taskset and task_input) under environment routing mode 'taskset', which "
                "runs episode rows only: convert it, or use mode 'agent' or 'legacy'"
            )
        server = self.environment_server
        assert server is not None  # the settings refuse legacy without one
        if self.known is not None and server not in self.known:
            known = ", ".join(sorted(self.known)) or "none"
            raise RoutingError(f"environment server {server!r} of legacy routing is unknown (known: {known})")
        self._check_pairings(row, (server,))
        return (server,)


def routing_key(row: dict[str, Any]) -> tuple[str, str]:
    """What routes ``row`` and how it is named: ``(taskset, "taskset")``, ``(agent, "agent")``,
    ``(task source, "task_source")`` or ``("_default", "default")``."""
    taskset = taskset_of(row)
    if taskset is not None:
        return taskset, "taskset"
    ref = row.get("agent_ref")
    if ref is not None:
        name = ref.get("name") if isinstance(ref, dict) else None
        if not isinstance(name, str) or not name:
            raise RoutingError(f"agent_ref must be an object with a 'name' string, got {ref!r}")
        return name, "agent"
    source = row.get("task_source")
    if source is not None:
        if not isinstance(source, str) or not source:
            raise RoutingError(f"task_source must be a non-empty string, got {source!r}")
        return source, "task_source"
    return DEFAULT_KEY, "default"
