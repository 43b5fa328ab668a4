"""The Python API, as NeMo Gym's ``RolloutCollectionHelper`` offers it to trainers.

``preprocess_examples`` applies the run-level routing and repetition a run applies to dataset
rows, to rows a caller holds: the same routing (``config.routing``) and the same stamps
(``rows.materialize``), so rows prepared here and rows the plugin materializes are alike.
``run_examples`` runs such rows in the caller's event loop (``dispatch.examples``) and hands
each result back as it finishes. Both take their arguments through the plugin's settings model:
the same names, defaults, bounds and messages as the options. Nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from pytest_rollouts.config.errors import describe_errors
from pytest_rollouts.config.routing import Routing, RoutingError, routing_key
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.rows.episodes import taskset_of
from pytest_rollouts.rows.materialize import materialize_row
from pytest_rollouts.rows.schema import CREATE_PARAMS

if TYPE_CHECKING:
    from pytest_rollouts.dispatch.examples import ExampleRun

WHERE = "preprocess_examples"
RUN = "run_examples"


def preprocess_examples(
    examples: Iterable[Mapping[str, Any]],
    agent_map: Mapping[str, str] | None = None,
    fan_out: Mapping[str, Sequence[str]] | None = None,
    num_repeats: int | Mapping[str, int] = 1,
    num_repeats_add_seed: bool = False,
    environment_routing_mode: str = "agent",
    environment_server: str | None = None,
) -> list[dict[str, Any]]:
    """Stamped copies of ``examples``, one per rollout; the input rows are never changed.

    Row ``i`` is task ``i``. Its agent is its ``agent_ref.name``, else its ``task_source``, else
    ``_default``, replaced through ``agent_map``; ``fan_out`` copies it to each agent listed for
    that key, rollout indices going on from one agent to the next. ``num_repeats`` is a count,
    or counts by agent name with ``_default`` for the rest. A ``task_source`` no ``agent_map``
    entry names is left for the run to resolve, as NeMo Gym leaves it without a config.

    ``environment_routing_mode`` routes flat rows (not episode rows) as a run's
    ``--rollouts-environment-routing-mode`` does: ``legacy`` sends each one to ``environment_server``
    (stamped ``_ng_environment_server``, its ``agent_ref`` kept), ``taskset`` refuses them.

    Raises ``ValueError`` for bad arguments and for a row whose agent cannot be decided.
    """
    settings = _settings(agent_map, fan_out, num_repeats, environment_routing_mode, environment_server)
    routing = Routing(
        None,
        None,
        WHERE,
        agent_map=settings.agent_map,
        fan_out=settings.fan_out,
        mode=settings.environment_routing_mode,
        environment_server=settings.environment_server,
    )
    via_server = settings.environment_routing_mode == "legacy"
    stamped: list[dict[str, Any]] = []
    for task_index, example in enumerate(_rows(examples, WHERE)):
        row, episode = _example(task_index, example)
        try:
            agents = _agents(routing, row)
        except RoutingError as exc:
            raise ValueError(f"{WHERE}: row {task_index}: {exc}") from None
        rollout_index = 0
        for agent in agents:
            for _ in range(settings.repeats_for(agent or "")):
                stamped.append(
                    materialize_row(
                        row,
                        task_index=task_index,
                        rollout_index=rollout_index,
                        agent=agent,
                        create_params={},
                        add_seed=num_repeats_add_seed,
                        episode=episode,
                        via_server=via_server and not episode,
                    )
                )
                rollout_index += 1
    return stamped


def _example(task_index: int, example: Any) -> tuple[dict[str, Any], bool]:
    """A copy of one caller's row, and whether it is an episode row; a row a run would refuse is refused."""
    if not isinstance(example, Mapping):
        raise ValueError(f"{WHERE}: row {task_index} is a {type(example).__name__}, not a JSON object (a mapping)")
    row = dict(example)
    episode = taskset_of(row) is not None
    params = row.get(CREATE_PARAMS)
    if params is not None and not isinstance(params, Mapping) and not episode:
        # As a dataset row is refused: adding the seed would replace the value without a word.
        raise ValueError(
            f"{WHERE}: row {task_index}: {CREATE_PARAMS} must be a JSON object, not {type(params).__name__}"
        )
    return row, episode


def _settings(agent_map: Any, fan_out: Any, num_repeats: Any, mode: Any, server: Any) -> Settings:
    for name, value in (("agent_map", agent_map), ("fan_out", fan_out)):
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(
                f"{WHERE}: {name} must be a mapping, e.g. {{'_default': 'policy'}}, not {type(value).__name__}"
            )
    if isinstance(num_repeats, bool):  # a bool is an int to Python, never a count here
        raise ValueError(f"{WHERE}: num_repeats must be a count, or counts by agent name, not {num_repeats!r}")
    given = {
        "agent_map": dict(agent_map or {}),
        "fan_out": dict(fan_out or {}),
        "repeats": dict(num_repeats) if isinstance(num_repeats, Mapping) else num_repeats,
        "environment_routing_mode": mode,
        "environment_server": server,
    }
    return _validated(given, {"repeats": "num_repeats"})


def _rows(rows: Any, where: str) -> Iterable[Any]:
    """``rows`` if it is a collection of rows; one row, a string or None given by mistake is named."""
    if rows is None or isinstance(rows, str | bytes | Mapping) or not isinstance(rows, Iterable):
        raise ValueError(f"{where}: rows must be a list (or another iterable) of rows, not {type(rows).__name__}")
    return rows


def _validated(given: dict[str, Any], renamed: Mapping[str, str]) -> Settings:
    """The arguments through the run's own validation: the same rules, bounds and messages, naming
    each argument (``renamed``: the settings fields whose argument has another name)."""
    names = {field: renamed.get(field, field) for field in given}
    try:
        return Settings.model_validate(given, context={"sources": names})
    except ValidationError as exc:
        raise ValueError(describe_errors(exc, names)) from None


def run_examples(
    rows: Iterable[Mapping[str, Any]],
    agents: Mapping[str, str],
    *,
    parallel: int = 64,
    max_resident: int | None = None,
    dispatch_budget: float | None = None,
    drain_margin: float | None = None,
    timeout: float = 3600.0,
    retries: int = 2,
    retry_backoff: float = 1.0,
    agent_header: Iterable[str] = (),
    no_health_check: bool = False,
    health_ignore: Iterable[str] = (),
    health_workers: int = 8,
    environment_server: str | None = None,
) -> ExampleRun:
    """Run ``rows`` in the running event loop; ``async with`` the result for ``(row, result)`` pairs.

    ``agents`` maps agent names to URLs. Rows are sent as given, each to the agent its
    ``agent_ref.name`` names (stamp them with ``preprocess_examples``); pairs come in completion
    order. ``result`` is exactly the agent's ``/run`` reply, or for a rollout that failed the
    failures sidecar's row (``_ng_failure_class`` and the other ``_ng_failure_*`` fields), or for
    one the dispatch budget drained a ``cancelled`` row marked ``_ng_dispatch_drained``. The other
    arguments are the plugin's options of the same names (``max_resident``: rollouts started and
    not yet taken by the caller). Leaving the block cancels whatever is in flight.

    ``environment_server`` (NeMo Gym's ``environment_server_name``, one of ``agents``) receives every
    flat row, as legacy routing sends it; a flat row stamped ``_ng_environment_server`` (by
    ``preprocess_examples(environment_routing_mode="legacy", ...)``) goes to its stamp without it.
    Either way its result and failure rows carry the stamp, and its own ``agent_ref`` if any.

    Raises ``ValueError`` for a bad argument, and, before anything is sent, for a row that lacks its
    stamps or names an agent not in ``agents`` (a ``Sequence`` of rows is checked whole first; rows
    from any other iterable are checked as they are read). Entering the block raises
    ``HealthCheckFailed`` when an agent fails its health check (then nothing was sent).
    """
    # Every argument after ``agents`` is the option of the same name (locals(): the arguments only, yet).
    given = {name: value for name, value in locals().items() if name not in ("rows", "agents")}
    _rows(rows, RUN)
    header = _header(agents, given)
    # The HTTP client is loaded with the first run: preprocessing alone does not pay for it.
    from pytest_rollouts.dispatch.examples import ExampleRun

    return ExampleRun(header, rows, environment_server)


def _header(agents: Any, given: dict[str, Any]) -> PlanHeader:
    """``run_examples``' arguments through the run's validation and the checks across them: the plan's header."""
    if not isinstance(agents, Mapping) or not agents:
        raise ValueError(f"{RUN}: agents must map agent names to URLs, e.g. {{'policy': 'http://127.0.0.1:8000'}}")
    # As --rollouts-agent NAME=URL reads a name: one of these would be read as part of the URL.
    odd = sorted(repr(n) for n in agents if not isinstance(n, str) or n != n.strip() or not n or set(n) & set("=:/"))
    if odd:
        raise ValueError(f"{RUN}: agents: {', '.join(odd)} is no agent name (a name has no '=', ':' or '/')")
    server = given["environment_server"]
    given = {
        **given,
        "agent": [f"{name}={url}" for name, url in agents.items()],
        "agent_header": list(given["agent_header"]),
        "health_ignore": list(given["health_ignore"]),
        # Given a server, flat rows go to it: legacy routing, which the settings check as a pair.
        "environment_routing_mode": "agent" if server is None else "legacy",
    }
    settings = _validated(given, {"agent": "agents"})
    urls = settings.named_agent_urls
    unknown = sorted({h.agent for h in settings.agent_header if h.agent is not None} - set(urls))
    if unknown:  # a typo would send those agents' requests without the header
        raise ValueError(f"{RUN}: agent_header names agents not in agents: {', '.join(unknown)}")
    if server is not None and server not in urls:
        raise ValueError(f"{RUN}: environment_server {server!r} is not in agents")
    return PlanHeader.of(settings, urls, parallel=settings.parallel, limit=settings.resident_limit)


def _agents(routing: Routing, row: dict[str, Any]) -> tuple[str | None, ...]:
    """The agents ``row`` runs on; ``(None,)`` when that is left to the run (an unmapped task source)."""
    key, kind = routing_key(row)
    if kind != "taskset" and routing.mode != "agent":
        return routing.agents_for(row)
    if kind == "task_source" and key not in routing.agent_map and key not in routing.fan_out:
        return (None,)
    if kind == "default" and key not in routing.agent_map and key not in routing.fan_out:
        raise RoutingError("it names no agent (agent_ref.name) and agent_map has no '_default' entry")
    return routing.agents_for(row)
