"""The Python API, as NeMo Gym's ``RolloutCollectionHelper`` offers it to trainers.

``preprocess_examples`` applies the run-level routing and repetition a run applies to dataset
rows, to rows a caller holds: the same routing (``config.routing``) and the same stamps
(``rows.materialize``), so rows prepared here and rows the plugin materializes are alike.
Nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from pytest_rollouts.config.routing import Routing, RoutingError, routing_key
from pytest_rollouts.config.settings import Settings, describe_errors
from pytest_rollouts.rows.episodes import taskset_of
from pytest_rollouts.rows.materialize import materialize_row

WHERE = "preprocess_examples"


def preprocess_examples(
    examples: Iterable[Mapping[str, Any]],
    agent_map: Mapping[str, str] | None = None,
    fan_out: Mapping[str, Sequence[str]] | None = None,
    num_repeats: int | Mapping[str, int] = 1,
    num_repeats_add_seed: bool = False,
) -> list[dict[str, Any]]:
    """Stamped copies of ``examples``, one per rollout; the input rows are never changed.

    Row ``i`` is task ``i``. Its agent is its ``agent_ref.name``, else its ``task_source``, else
    ``_default``, replaced through ``agent_map``; ``fan_out`` copies it to each agent listed for
    that key, rollout indices going on from one agent to the next. ``num_repeats`` is a count,
    or counts by agent name with ``_default`` for the rest. A ``task_source`` no ``agent_map``
    entry names is left for the run to resolve, as NeMo Gym leaves it without a config.

    Raises ``ValueError`` for bad arguments and for a row whose agent cannot be decided.
    """
    settings = _settings(agent_map, fan_out, num_repeats)
    routing = Routing(None, None, WHERE, agent_map=settings.agent_map, fan_out=settings.fan_out)
    stamped: list[dict[str, Any]] = []
    for task_index, example in enumerate(examples):
        row = dict(example)
        episode = taskset_of(row) is not None
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
                    )
                )
                rollout_index += 1
    return stamped


def _settings(
    agent_map: Mapping[str, str] | None, fan_out: Mapping[str, Sequence[str]] | None, num_repeats: Any
) -> Settings:
    """The arguments through the run's own validation: the same rules, bounds and messages."""
    given = {
        "agent_map": dict(agent_map or {}),
        "fan_out": {key: list(agents) for key, agents in (fan_out or {}).items()},
        "repeats": dict(num_repeats) if isinstance(num_repeats, Mapping) else num_repeats,
    }
    names = {"agent_map": "agent_map", "fan_out": "fan_out", "repeats": "num_repeats"}
    try:
        return Settings.model_validate(given, context={"sources": names})
    except ValidationError as exc:
        raise ValueError(describe_errors(exc, names)) from None


def _agents(routing: Routing, row: dict[str, Any]) -> tuple[str | None, ...]:
    """The agents ``row`` runs on; ``(None,)`` when that is left to the run (an unmapped task source)."""
    key, kind = routing_key(row)
    if kind == "task_source" and key not in routing.agent_map and key not in routing.fan_out:
        return (None,)
    if kind == "default" and key not in routing.agent_map and key not in routing.fan_out:
        raise RoutingError("it names no agent (agent_ref.name) and agent_map has no '_default' entry")
    return routing.agents_for(row)
