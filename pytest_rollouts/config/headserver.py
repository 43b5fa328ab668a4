"""Agent names and addresses from a running NeMo Gym head server.

NeMo Gym users already name their agents in one merged config that the head server
serves at ``GET /global_config_dict_yaml`` (a JSON-encoded YAML string). Reading it
lets them write ``agent_ref: {name: math_agent}`` or ``task_source: math_rs`` rows
and point us at the head server instead of listing every address again.

Keys read, all at the top level of that config:

- ``<name>.responses_api_agents.<type>.{host, port}``: agent ``<name>`` at ``http://host:port``;
  ``...<type>.resources_server.name`` says which resources server it fronts.
- ``<name>.environment_servers.<type>.{host, port}``: an environment server, where
  episode (taskset) rows can be routed (``[tasksets]`` or ``--rollouts-agent-map``); ``<type>``
  is stamped ``_ng_result_type`` on every row that goes through it, as NeMo Gym stamps it.
- ``<name>.resources_servers.<type>.datasets[].agent``: the agent a resources server's
  datasets are pinned to, which is how ``task_source: <name>`` resolves. Without a pin,
  the one agent that fronts that resources server; an agent's own name resolves to it.
- ``datasets[].{jsonl_fpath, type, prompt_config}`` of resources servers and agents: a dataset
  file's split (``--rollouts-split``) and prompt template, for the files the run reads.
- Pairings, checked on every row before any request (NeMo Gym's ``_validate_agent_pairings`` and
  ``_validate_environment_servers``): the resources server each agent fronts (above), the one
  that declares each dataset file, and ``<name>.environment_servers.<type>.agent_server`` (a
  name, or ``{name: ...}``), the agent an environment server runs its rows on.

- Top-level collection keys, defaults for the options of the same meaning that the run does not
  give (``RUN_KEYS``): ``retry_invalid_judge_responses``, ``environment_routing_mode``,
  ``environment_server_name``; and ``environment_server_routes`` (taskset to environment server),
  routes a suite's ``[tasksets]`` may override.

Hosts and ports may hold OmegaConf interpolations (``${head_server.host}``,
``${oc.env:VAR,default}``), which ``to_yaml`` leaves unresolved; those two forms are resolved.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import yaml

from pytest_rollouts.config.pairings import Pairings
from pytest_rollouts.config.routing import Discovered, HeadDataset
from pytest_rollouts.net.blocking import RequestFailed, RequestTimeout, request

CONFIG_PATH = "/global_config_dict_yaml"
# NeMo Gym's collection keys a merged config may carry at its top level, and the options they default.
RUN_KEYS = {
    "retry_invalid_judge_responses": "retry_invalid_judge_responses",
    "environment_routing_mode": "environment_routing_mode",
    "environment_server_name": "environment_server",
}
_INTERPOLATION = re.compile(r"\$\{([^{}]*)\}")
MAX_INTERPOLATION_DEPTH = 10


class HeadServerError(Exception):
    """The head server could not be read, or its config makes no sense; names the server."""


def discover(base_url: str, *, timeout: float) -> Discovered:
    """Read the head server's config and pick out agents and task sources.

    ``timeout`` bounds the whole request, reply included: discovery runs before anything
    else, and a head server that trickles its config must not hold the session there.
    """
    url = base_url.rstrip("/") + CONFIG_PATH
    try:
        response = request("GET", base_url, CONFIG_PATH, {"Accept": "application/json"}, timeout=timeout)
    except RequestTimeout as exc:
        raise HeadServerError(f"the NeMo Gym head server at {base_url} sent {exc} for {CONFIG_PATH}") from None
    except RequestFailed as exc:
        raise HeadServerError(
            f"cannot reach the NeMo Gym head server at {base_url} ({exc}); is it running, on that port?"
        ) from None
    if response.status != 200:
        raise HeadServerError(f"NeMo Gym head server {base_url} answered HTTP {response.status} for {CONFIG_PATH}")
    try:
        text = json.loads(response.body)
        config = yaml.safe_load(text) if isinstance(text, str) else text
    except (ValueError, yaml.YAMLError) as exc:
        raise HeadServerError(f"{url} did not return a JSON-encoded YAML config: {exc}") from None
    if not isinstance(config, dict):
        raise HeadServerError(f"{url} returned a {type(config).__name__}, not a config mapping")
    return config_agents(config)


def config_datasets(config: Mapping[str, Any]) -> tuple[HeadDataset, ...]:
    """The dataset entries of every resources server and agent in a NeMo Gym global config, each
    with the resources server its rows are verified by: the one listing it, or the one the agent
    listing it fronts (NeMo Gym's benchmarks list their datasets under their agent)."""
    found = []
    for name, entry in config.items():
        for kind in ("resources_servers", "responses_api_agents"):
            server = _only_server(entry, kind)
            verifier = str(name) if kind == "resources_servers" else _name_of((server or {}).get("resources_server"))
            for dataset in (server or {}).get("datasets") or ():
                if isinstance(dataset, Mapping) and isinstance(dataset.get("jsonl_fpath"), str):
                    kind_of = dataset.get("type")
                    prompt = dataset.get("prompt_config")
                    found.append(
                        HeadDataset(
                            str(dataset.get("name") or name),
                            dataset["jsonl_fpath"],
                            kind_of if isinstance(kind_of, str) else None,
                            prompt if isinstance(prompt, str) else None,
                            verifier,
                        )
                    )
    return tuple(found)


def config_agents(config: Mapping[str, Any]) -> Discovered:
    """Agents (name to URL) and task sources (name to agent) in a NeMo Gym global config, and each
    environment server's type (NeMo Gym's ``server_types`` in ``_run_examples_with_metadata``)."""
    agents: dict[str, str] = {}
    fronts: dict[str, list[str]] = {}
    for name, entry in config.items():
        server = _only_server(entry, "responses_api_agents")
        if server is None or "port" not in server:
            continue
        agents[str(name)] = _address(config, server, str(name))
        resources = server.get("resources_server")
        if isinstance(resources, Mapping) and resources.get("name"):
            fronts.setdefault(str(resources["name"]), []).append(str(name))
    sources: dict[str, str] = {name: name for name in agents}
    runs_on: dict[str, str] = {}
    types: dict[str, str] = {}
    for name, entry in config.items():
        server = _only_server(entry, "environment_servers")
        if server is not None and "port" in server:
            agents[str(name)] = _address(config, server, str(name))
            types[str(name)] = str(next(iter(entry["environment_servers"])))
            agent = _name_of(server.get("agent_server"))
            if agent is not None:
                runs_on[str(name)] = agent
    for name, entry in config.items():
        server = _only_server(entry, "resources_servers")
        if server is None:
            continue
        datasets = server.get("datasets")
        pins = {str(d["agent"]) for d in datasets or () if isinstance(d, Mapping) and d.get("agent")}
        if len(pins) == 1:
            sources[str(name)] = pins.pop()
        elif not pins and len(fronts.get(str(name), ())) == 1:
            sources[str(name)] = fronts[str(name)][0]
    resources = frozenset(str(name) for name, entry in config.items() if _only_server(entry, "resources_servers"))
    pairings = Pairings(
        resources,
        {agent: server for server, names in fronts.items() for agent in names},
        runs_on,
    )
    options = {option: config[key] for key, option in RUN_KEYS.items() if config.get(key) is not None}
    return Discovered(agents, sources, config_datasets(config), pairings, options, _taskset_routes(config), types)


def _taskset_routes(config: Mapping[str, Any]) -> dict[str, str]:
    """``environment_server_routes``: which environment server runs each taskset's episode rows."""
    routes = config.get("environment_server_routes")
    if routes is None:
        return {}
    if not isinstance(routes, Mapping) or not all(
        isinstance(server, str) and server and isinstance(taskset, str) for taskset, server in routes.items()
    ):
        raise HeadServerError(
            f"environment_server_routes must map taskset names to environment server names, not {routes!r}"
        )
    return dict(routes)


def _name_of(reference: Any) -> str | None:
    """A server reference as NeMo Gym's configs write it: a name, or ``{type: ..., name: ...}``."""
    if isinstance(reference, Mapping):
        reference = reference.get("name")
    return str(reference) if isinstance(reference, str) and reference else None


def _address(config: Mapping[str, Any], server: Mapping[str, Any], name: str) -> str:
    host = _resolve(config, server.get("host"), f"{name}: host") or "127.0.0.1"
    port = _resolve(config, server["port"], f"{name}: port")
    return f"http://{host}:{port}"


def _resolve(config: Mapping[str, Any], value: Any, where: str, depth: int = 0) -> Any:
    """OmegaConf interpolations left in the YAML: ``${dotted.path}`` and ``${oc.env:VAR[,default]}``.

    ``to_yaml`` keeps interpolations unresolved, and hosts and ports are where configs use
    them (``${head_server.host}``); anything else is refused by name, never guessed.
    """
    if not isinstance(value, str) or "${" not in value:
        return value
    if depth > MAX_INTERPOLATION_DEPTH:
        raise HeadServerError(f"head server config, {where}: interpolation loop in {value!r}")

    def one(match: re.Match[str]) -> str:
        expression = match[1].strip()
        if expression.startswith("oc.env:"):
            var, _, default = expression.removeprefix("oc.env:").partition(",")
            found: Any = os.environ.get(var.strip(), default.strip() or None)
        else:
            found = _lookup(config, expression)
        if found is None or isinstance(found, (Mapping, list)):
            raise HeadServerError(
                f"head server config, {where}: cannot resolve ${{{expression}}} "
                "(read are ${dotted.path} and ${oc.env:VAR[,default]})"
            )
        return str(_resolve(config, found, where, depth + 1))

    return _INTERPOLATION.sub(one, value)


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _only_server(entry: Any, kind: str) -> Mapping[str, Any] | None:
    """The one server of ``kind`` an instance entry declares, or None (not that kind, or ambiguous)."""
    if not isinstance(entry, Mapping):
        return None
    servers = entry.get(kind)
    if not isinstance(servers, Mapping) or len(servers) != 1:
        return None
    (server,) = servers.values()
    return server if isinstance(server, Mapping) else None
