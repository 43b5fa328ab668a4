"""Which agent serves a row, decided before any request is sent.

Agents come from the command line (``--rollouts-agent [NAME=]URL``) and from suite
declarations. A row picks one with ``agent_ref.name``; a row without one goes to its
suite's default agent. The command line wins: an unnamed ``--rollouts-agent URL``
becomes the address of every suite's default agent, which is how a shipped suite is
pointed at an external server without editing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .settings import Settings
from .suite import Suite

CLI_DEFAULT_NAME = "default"


class RoutingError(ValueError):
    """An agent that cannot be resolved; raised before any dispatch."""


@dataclass(frozen=True)
class Endpoint:
    """Where an agent lives: a URL, or an app factory (``file``, ``factory``) started on loopback."""

    name: str
    url: str | None = None
    embedded: tuple[Path, str] | None = None


@dataclass(frozen=True)
class Routing:
    """The agents visible to one dataset file."""

    default: str | None
    known: frozenset[str]
    source: str

    def agent_for(self, row: dict[str, Any]) -> str:
        ref = row.get("agent_ref")
        if ref is None:
            if self.default is None:
                raise RoutingError(
                    "row has no agent_ref and no default agent is set "
                    f"(pass --rollouts-agent URL or declare 'agent' in {self.source})"
                )
            return self.default
        name = ref.get("name") if isinstance(ref, dict) else None
        if not isinstance(name, str) or not name:
            raise RoutingError(f"agent_ref must be an object with a 'name' string, got {ref!r}")
        if name not in self.known:
            known = ", ".join(sorted(self.known)) or "none"
            raise RoutingError(f"row names unknown agent {name!r} (known agents: {known})")
        return name


class AgentRegistry:
    """Every agent the run can reach, so two suites cannot give one name two addresses."""

    def __init__(self, settings: Settings) -> None:
        self._cli_default = settings.default_agent_url
        self._cli_named = settings.named_agent_urls
        self._endpoints: dict[str, Endpoint] = {name: Endpoint(name, url=url) for name, url in self._cli_named.items()}
        if self._cli_default is not None and CLI_DEFAULT_NAME not in self._endpoints:
            self._endpoints[CLI_DEFAULT_NAME] = Endpoint(CLI_DEFAULT_NAME, url=self._cli_default)

    def routing_for(self, suite: Suite | None) -> Routing:
        if suite is None:
            default = CLI_DEFAULT_NAME if self._cli_default is not None else None
            return Routing(default, frozenset(self._cli_named) | _maybe(default), "a rollouts.toml")
        default = suite.config.agent
        if default is None and self._cli_default is not None:
            default = CLI_DEFAULT_NAME
        for name, declaration in suite.config.agents.items():
            self._register(name, self._endpoint_for(suite, name, declaration), suite)
        known = frozenset(suite.config.agents) | frozenset(self._cli_named) | _maybe(default)
        return Routing(default, known, str(suite.path))

    def _endpoint_for(self, suite: Suite, name: str, declaration: Any) -> Endpoint:
        if name in self._cli_named:
            return Endpoint(name, url=self._cli_named[name])
        if name == suite.config.agent and self._cli_default is not None:
            return Endpoint(name, url=self._cli_default)
        if declaration.url is not None:
            return Endpoint(name, url=declaration.url.rstrip("/"))
        file, _, factory = declaration.embedded.partition(":")
        return Endpoint(name, embedded=((suite.root / file).resolve(), factory or "make_app"))

    def _register(self, name: str, endpoint: Endpoint, suite: Suite) -> None:
        existing = self._endpoints.setdefault(name, endpoint)
        if existing != endpoint:
            raise RoutingError(
                f"{suite.path}: agent {name!r} is declared with a different address elsewhere "
                f"({_describe(existing)} vs {_describe(endpoint)})"
            )

    def knows(self, name: str) -> bool:
        return name in self._endpoints

    def endpoint(self, name: str) -> Endpoint:
        return self._endpoints[name]


def _maybe(name: str | None) -> frozenset[str]:
    return frozenset() if name is None else frozenset({name})


def _describe(endpoint: Endpoint) -> str:
    if endpoint.url is not None:
        return endpoint.url
    assert endpoint.embedded is not None
    return f"embedded {endpoint.embedded[0]}:{endpoint.embedded[1]}"
