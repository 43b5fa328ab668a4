"""The agents a run can reach: the registry (options, suites, a head server), and their addresses,
starting the suites' embedded agents on first need and stopping them at the end.

One object per run, used by the pytest adapter and the Python API alike; it raises
``AgentsError`` with the message to show, and the caller decides how a refusal ends its run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_rollouts.config.layers import with_defaults
from pytest_rollouts.config.settings import DEFAULT_KEY, Settings
from pytest_rollouts.options import OPTION

if TYPE_CHECKING:
    from pytest_rollouts.config.embedded import EmbeddedServers
    from pytest_rollouts.config.registry import AgentRegistry
    from pytest_rollouts.config.routing import Discovered, Routing
    from pytest_rollouts.model.spec import ModelPlan
    from pytest_rollouts.net.auth import Redactor

HEAD_SERVER_TIMEOUT_S = 10.0
# The one option a suite's ``rollouts.toml`` sets for the whole run (the run's options win).
JUDGE_RETRY = "retry_invalid_judge_responses"


class AgentsError(ValueError):
    """An agent that cannot be found or started; raised before any request is sent."""


class Agents:
    """Agents by name, and where each one answers. ``root``: where suite declarations are looked for
    up to (pytest's rootdir, or the directory a script runs in)."""

    def __init__(self, settings: Settings, root: Path) -> None:
        self._settings = settings
        self._root = root
        self._registry: AgentRegistry | None = None
        self._urls: dict[str, str] = {}
        self._servers: list[EmbeddedServers] = []
        # What the head server's config said, once asked (``registry``): its datasets' splits and prompts.
        self.discovered: Discovered | None = None
        # The first suite that opted in to or out of the judge-response retry, by its choice; and whether
        # the run's options (or the head server's config) decide it, whatever the suites say.
        self._judge_retry: dict[bool, Path] = {}
        self._judge_retry_given = JUDGE_RETRY in settings.model_fields_set

    @property
    def registry(self) -> AgentRegistry:
        """The agents this run can reach; a head server is asked once, before the first dataset is read."""
        if self._registry is None:
            from pytest_rollouts.config.registry import AgentRegistry

            discovered = None
            if self._settings.head_server is not None:
                from pytest_rollouts.config.headserver import HeadServerError, discover

                try:
                    discovered = discover(self._settings.head_server, timeout=HEAD_SERVER_TIMEOUT_S)
                except HeadServerError as exc:
                    raise AgentsError(str(exc)) from None
            if discovered is not None:
                try:
                    self._settings = with_defaults(self._settings, discovered.options, "the head server's config")
                except ValueError as exc:
                    raise AgentsError(str(exc)) from None
                self._judge_retry_given |= JUDGE_RETRY in discovered.options
            unpaired = self._settings.unpaired_environment_server()
            if unpaired:  # a server given alone, which the head server's config did not pair with legacy
                raise AgentsError(unpaired)
            self._registry = AgentRegistry(self._settings, discovered)
            self.discovered = discovered
        return self._registry

    @property
    def settings(self) -> Settings:
        """The run's settings, with what the head server's config (once asked: ``registry``) and the
        suites routed so far set for the options the run does not give."""
        return self._settings

    def environment_servers(self) -> dict[str, str | None]:
        """The environment servers flat rows are sent through, each to the agent it runs them on
        (its ``agent_server`` in the head server's config; None when no config says): the server
        legacy routing names, and under agent routing those the head server's config puts in front
        of an agent."""
        runs_on: dict[str, str | None] = {}
        if self.discovered is not None:
            runs_on.update(self.discovered.pairings.runs_on)
        settings = self._settings
        if settings.environment_routing_mode == "legacy":
            assert settings.environment_server is not None  # the settings refuse legacy without one
            return {settings.environment_server: runs_on.get(settings.environment_server)}
        return runs_on

    def result_types(self, names: Iterable[str]) -> dict[str, str]:
        """The type of each environment server among ``names`` as the head server's config declares it
        (none without a config): what the rows sent through it are stamped ``_ng_result_type``."""
        declared = self.discovered.result_types if self.discovered is not None else {}
        return {name: declared[name] for name in names if name in declared}

    def routing_for(self, dataset: Path) -> Routing:
        """How the rows of ``dataset`` find their agents: its suite's declaration, if any, and the options."""
        from pytest_rollouts.config import find_declaration

        declaration = find_declaration(dataset.parent, self._root)
        suite = None
        if declaration is not None:
            from pytest_rollouts.config.suite import load_suite  # its models, only for a declaration

            suite = load_suite(declaration)
        routing = self.registry.routing_for(suite, dataset, self._root)
        if suite is not None and suite.config.retry_invalid_judge_responses is not None:
            self._judge_retry_of(suite.path, suite.config.retry_invalid_judge_responses)
        return routing

    def _judge_retry_of(self, suite: Path, opted_in: bool) -> None:
        """A suite's ``retry_invalid_judge_responses``: the run's unless an option or the head server
        says otherwise. One run writes one output, so suites that disagree cannot share it."""
        from pytest_rollouts.config.routing import RoutingError

        if self._judge_retry_given:
            return
        self._judge_retry.setdefault(opted_in, suite)
        if len(self._judge_retry) > 1:
            raise RoutingError(
                f"{self._judge_retry[True]} opts in to {JUDGE_RETRY} and {self._judge_retry[False]} does not; "
                f"one run writes one output: collect them apart, or give {OPTION[JUDGE_RETRY].cli} to decide"
            )
        self._settings = with_defaults(self._settings, {JUDGE_RETRY: opted_in}, str(suite))

    def check_named(self) -> None:
        """A per-agent repeat count or header for an agent nobody knows is a typo that would go unnoticed."""
        settings, registry = self._settings, self.registry
        repeats = settings.repeats if isinstance(settings.repeats, dict) else {}
        for option, names in (
            ("repeats", [a for a in repeats if a != DEFAULT_KEY]),
            ("agent_header", [h.agent for h in settings.agent_header if h.agent is not None]),
        ):
            unknown = sorted({a for a in names if not registry.knows(a)})
            if unknown:
                raise AgentsError(f"{settings.source_of(option)} names unknown agents: {', '.join(unknown)}")

    def unused_keys_notice(self) -> str:
        """What to say about routing keys (agent map, fan-out) no collected row matched, or ""."""
        unused = self.registry.unused_keys()
        if not unused:
            return ""
        return (
            f"no collected row is keyed {', '.join(map(repr, unused))} "
            f"({self._settings.source_of('agent_map')} / {self._settings.source_of('fan_out')}): a typo? "
            "Keys are agent names, task sources, tasksets or _default"
        )

    def urls(self, names: Iterable[str], recorded: Callable[[], Iterable[str]] = tuple) -> dict[str, str]:
        """Addresses of ``names``, starting embedded agents that are not running yet.

        ``recorded``: the dataset paths (relative to ``root``) of the run being resumed, for a
        caller that read no dataset itself (an xdist controller) to learn suite agents from.
        """
        wanted = set(names)
        registry = self.registry
        missing = sorted(wanted - set(self._urls))
        self._learn(missing, recorded)
        unknown = [name for name in missing if not registry.knows(name)]
        if unknown:
            raise AgentsError(f"agent {unknown[0]!r} of the recorded run is not configured in this session")
        endpoints = [registry.endpoint(name) for name in missing]
        factories = [e.embedded for e in endpoints if e.embedded is not None]
        factories += [e.model.embedded for e in endpoints if e.model is not None and e.model.embedded is not None]
        started = self._start_embedded(factories, missing) if factories else {}
        for e in endpoints:
            if e.model is not None:  # its model's base URL: an embedded model serves the API under /v1
                model = e.model
                served = model.url if model.url is not None else started[model.embedded] + "/v1"  # type: ignore[index]
                self._urls[e.name] = served
            else:
                self._urls[e.name] = e.url if e.url is not None else started[e.embedded]  # type: ignore[index]
        return {name: self._urls[name] for name in wanted}

    def _learn(self, names: Iterable[str], recorded: Callable[[], Iterable[str]]) -> None:
        """Read the suites of the recorded datasets when one of ``names`` is not known yet."""
        if any(not self.registry.knows(name) for name in names):
            for path in recorded():
                self.routing_for(self._root / path)

    def is_model(self, name: str, recorded: Callable[[], Iterable[str]] = tuple) -> bool:
        """Whether ``name`` is a model agent, which the dispatcher runs itself (no ``/health``, no
        ``/aggregate_metrics``: its groups get local metrics); ``recorded`` as for ``urls``."""
        self._learn([name], recorded)
        registry = self.registry
        return registry.knows(name) and registry.endpoint(name).model is not None

    def models(self, names: Iterable[str]) -> dict[str, ModelPlan]:
        """The model agents among ``names`` (started by ``urls`` already), as the dispatcher gets them.

        Their verifier and tools are imported here once, and their key's variable looked up, so a
        typo is a refusal before anything is sent rather than every rollout's failure.
        """
        wanted = sorted(n for n in names if self.is_model(n))
        if not wanted:  # most runs: nothing to import
            return {}
        from pytest_rollouts.model.loading import LoadError, load_named
        from pytest_rollouts.model.tools import Toolbox

        plans = {}
        for name in wanted:
            endpoint = self.registry.endpoint(name).model
            assert endpoint is not None
            model = endpoint.plan
            try:
                if not callable(load_named(model.verifier)):
                    raise LoadError(f"the verifier {model.verifier} is not callable")
                tools = load_named(model.tools) if model.tools else []
                if not isinstance(tools, list | tuple):
                    raise LoadError(f"the tools {model.tools} are not a list of functions")
                Toolbox(list(tools))  # each one's schema, as the dispatcher will make it
            except (LoadError, TypeError, ValueError) as exc:
                raise AgentsError(f"model agent {name!r}: {exc}") from exc
            if model.api_key_env and not os.environ.get(model.api_key_env):
                raise AgentsError(f"model agent {name!r}: the environment variable {model.api_key_env} is not set")
            plans[name] = replace(model, base_url=self._urls[name])
        return plans

    def secrets(self) -> Redactor:
        """Every secret the run holds, for what it sends elsewhere (its exports) to leave out: the
        header values given, the credentials of each address it reached or was given, and its model
        agents' API keys."""
        from pytest_rollouts.model.spec import model_headers
        from pytest_rollouts.net.address import Address
        from pytest_rollouts.net.auth import Redactor

        settings = self._settings
        held = {f"header {i}": {h.name: h.value.get_secret_value()} for i, h in enumerate(settings.agent_header)}
        urls = [*self._urls.values(), *(address.url for address in settings.agent)]
        held.update((f"address {i}", Address.parse(url).with_credentials({})) for i, url in enumerate(urls))
        for name in self._urls:
            model = self.registry.endpoint(name).model
            if model is not None:
                with suppress(ValueError):  # a key's variable unset: the run refused it before any call
                    held[f"model {name}"] = model_headers(model.plan)
        return Redactor(held)

    def _start_embedded(self, factories: list[tuple[Path, str]], names: list[str]) -> dict[tuple[Path, str], str]:
        """Serve suite-embedded agents; aiohttp is imported only here, off the path of runs that have none."""
        from pytest_rollouts.config.embedded import EmbeddedServerError, EmbeddedServers

        servers = EmbeddedServers(factories)
        self._servers.append(servers)
        try:
            return servers.start()
        except Exception as exc:  # the suite's own code: say which agent, not an internal error
            why = str(exc) if isinstance(exc, EmbeddedServerError) else repr(exc)
            raise AgentsError(f"cannot start an embedded agent ({', '.join(names)}): {why}") from exc

    def close(self) -> None:
        """Stop the embedded agents; they outlive dispatch so ``/aggregate_metrics`` can reach them."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.stop()
