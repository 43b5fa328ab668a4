"""Every agent a run can reach, and where each one answers.

Agents come from the command line (``--rollouts-agent [NAME=]URL``), a NeMo Gym head server, and
suite declarations. The command line wins: an unnamed ``--rollouts-agent URL`` becomes the
address of every suite's default agent, which is how a shipped suite is pointed at an external
server without editing it. Each suite's rows get their ``Routing`` here.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rollouts.config.routing import Discovered, Routing, RoutingError
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.config.values import check_url
from pytest_rollouts.datatype import datatype
from pytest_rollouts.model.spec import ModelPlan
from pytest_rollouts.net.address import without_password

if TYPE_CHECKING:
    from pytest_rollouts.config.suite import Suite

CLI_DEFAULT_NAME = "default"
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@datatype(frozen=True)
class ModelEndpoint:
    """A model agent's model, where it answers (a base URL, or an app factory served on loopback
    whose base URL is ``<address>/v1``), and the rest of its declaration with paths made absolute:
    the dispatcher's plan, its ``base_url`` filled in once the address is known."""

    url: str | None
    embedded: tuple[Path, str] | None
    plan: ModelPlan


@datatype(frozen=True)
class Endpoint:
    """Where an agent lives: a URL, an app factory (``file``, ``factory``) started on loopback, or a
    model agent run by the dispatcher itself."""

    name: str
    url: str | None = None
    embedded: tuple[Path, str] | None = None
    model: ModelEndpoint | None = None


class AgentRegistry:
    """Every agent the run can reach, so two suites cannot give one name two addresses.

    Addresses come, strongest first, from ``--rollouts-agent NAME=URL``, from a NeMo Gym
    head server (``--rollouts-head-server``), then from suite declarations; an unnamed
    ``--rollouts-agent URL`` is the address of every suite's default agent.
    """

    def __init__(self, settings: Settings, discovered: Discovered | None = None) -> None:
        self._settings = settings
        self._cli_default = settings.default_agent_url
        self._cli_named = dict(settings.named_agent_urls)
        self._head = discovered or Discovered({}, {})
        self.used_keys: set[str] = set()
        self._fixed = {**self._head.agents, **self._cli_named}
        self._endpoints: dict[str, Endpoint] = {name: Endpoint(name, url=url) for name, url in self._fixed.items()}
        if self._cli_default is not None and CLI_DEFAULT_NAME not in self._endpoints:
            self._endpoints[CLI_DEFAULT_NAME] = Endpoint(CLI_DEFAULT_NAME, url=self._cli_default)

    def routing_for(self, suite: Suite | None, dataset: Path | None = None, root: Path | None = None) -> Routing:
        """How the rows of ``dataset`` (under ``root``, where the head server's paths start) find agents."""
        routing = self._suite_routing(suite)
        if dataset is None or root is None:
            return routing
        listed = next(
            (d.server for d in self._head.datasets if (root / d.jsonl_fpath).resolve() == dataset.resolve()), None
        )
        return replace(routing, dataset_server=listed)

    def _suite_routing(self, suite: Suite | None) -> Routing:
        fallback = CLI_DEFAULT_NAME if self._cli_default is not None else self._settings.fallback_agent
        if suite is None:
            return self._routing(fallback, frozenset(), "a rollouts.toml", None)
        default = suite.config.agent
        if default is None:
            default = fallback
        for name, declaration in suite.config.agents.items():
            self._register(name, self._endpoint_for(suite, name, declaration), suite)
        return self._routing(default, frozenset(suite.config.agents), str(suite.path), suite)

    def _routing(self, default: str | None, declared: frozenset[str], source: str, suite: Suite | None) -> Routing:
        return Routing(
            default,
            declared | frozenset(self._fixed) | _maybe(default),
            source,
            task_sources={**self._head.task_sources, **(suite.config.task_sources if suite else {})},
            tasksets={**self._head.tasksets, **(suite.config.tasksets if suite else {})},
            agent_map=self._settings.agent_map,
            fan_out=self._settings.fan_out,
            used=self.used_keys,
            agent_hint=self._settings.agent_hint,
            map_option=self._settings.source_of("agent_map"),
            fan_out_option=self._settings.source_of("fan_out"),
            keywords=suite.config.keywords if suite else (),
            pairings=self._head.pairings,
            mode=self._settings.environment_routing_mode,
            environment_server=self._settings.environment_server,
            direct=frozenset(self._cli_named),
        )

    def _endpoint_for(self, suite: Suite, name: str, declaration: Any) -> Endpoint:
        if name in self._fixed:
            return Endpoint(name, url=self._fixed[name])
        if name == suite.config.agent and self._cli_default is not None:
            return Endpoint(name, url=self._cli_default)
        if declaration.url is not None:
            return Endpoint(name, url=declaration.url.rstrip("/"))
        if declaration.verifier is not None:
            return Endpoint(name, model=self._model_for(suite, name, declaration))
        return Endpoint(name, embedded=_named(suite, declaration.embedded, "make_app"))

    def _model_for(self, suite: Suite, name: str, declaration: Any) -> ModelEndpoint:
        """A model agent's endpoint: ``--rollouts-model`` and ``--rollouts-model-name`` win over the
        suite's; a ``${VAR}`` in its ``model`` is read from the environment (only when it is used)."""
        where = f"{suite.path}: agents.{name}"
        url, embedded = self._settings.model, None
        if url is None and declaration.model is not None:
            expanded = _expanded(declaration.model, where)
            try:
                url = check_url(expanded).rstrip("/")
            except ValueError as exc:
                raise RoutingError(f"{where}.model: {exc}") from None
        elif url is None:
            embedded = _named(suite, declaration.model_embedded, "make_app")
        model_name = self._settings.model_name or declaration.model_name
        if not model_name:
            raise RoutingError(f"{where}: model_name is missing (declare it, or give --rollouts-model-name)")
        verifier = _named(suite, declaration.verifier, "score")
        tools = _named(suite, declaration.tools, "TOOLS") if declaration.tools else None
        plan = ModelPlan(
            "",
            model_name,
            declaration.api,
            declaration.api_key_env or "",
            f"{verifier[0]}:{verifier[1]}",
            f"{tools[0]}:{tools[1]}" if tools else "",
            declaration.max_turns,
        )
        return ModelEndpoint(url, embedded, plan)

    def _register(self, name: str, endpoint: Endpoint, suite: Suite) -> None:
        existing = self._endpoints.setdefault(name, endpoint)
        if existing != endpoint:
            raise RoutingError(
                f"{suite.path}: agent {name!r} is declared with a different address elsewhere "
                f"({_describe(existing)} vs {_describe(endpoint)})"
            )

    def unused_keys(self) -> list[str]:
        """``--rollouts-agent-map``/``--rollouts-fan-out`` keys that no collected row matched."""
        return sorted((set(self._settings.agent_map) | set(self._settings.fan_out)) - self.used_keys)

    def knows(self, name: str) -> bool:
        return name in self._endpoints

    def endpoint(self, name: str) -> Endpoint:
        return self._endpoints[name]


def _named(suite: Suite, reference: str, default: str) -> tuple[Path, str]:
    """``file.py:name`` of a suite: the file relative to the suite's directory."""
    file, _, name = reference.partition(":")
    return (suite.root / file).resolve(), name or default


def _expanded(value: str, where: str) -> str:
    """``value`` with each ``${VAR}`` replaced by the variable's value; an unset one is an error naming it."""

    def value_of(match: re.Match[str]) -> str:
        found = os.environ.get(match[1])
        if found is None:
            raise RoutingError(f"{where}.model: the environment variable {match[1]} is not set")
        return found

    return ENV_REFERENCE.sub(value_of, value)


def _maybe(name: str | None) -> frozenset[str]:
    return frozenset() if name is None else frozenset({name})


def _describe(endpoint: Endpoint) -> str:
    if endpoint.url is not None:
        return without_password(endpoint.url)
    if endpoint.model is not None:
        model = endpoint.model
        where = without_password(model.url) if model.url is not None else f"embedded {model.embedded}"
        return f"model agent {model.plan.model_name} at {where}, verifier {model.plan.verifier}"
    assert endpoint.embedded is not None
    return f"embedded {endpoint.embedded[0]}:{endpoint.embedded[1]}"
