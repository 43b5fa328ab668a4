"""Turn dataset rows into materialized rollout rows, as NeMo Gym's collector does.

Pure functions: rows and settings in, rows out. The materialized rows are exactly
what is sent to ``/run`` and what ``<stem>_materialized_inputs.jsonl`` records, so
the denominator of the score and the requests can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from pytest_rollouts.rows.schema import ATTEMPT_INDEX, CREATE_PARAMS, ENVIRONMENT_SERVER, ROLLOUT_INDEX, TASK_INDEX


def materialize_row(
    row: dict[str, Any],
    *,
    task_index: int,
    rollout_index: int,
    agent: str | None,
    create_params: dict[str, Any],
    add_seed: bool,
    episode: bool = False,
    via_server: bool = False,
    server_agent: str | None = None,
    stamp_server: bool = True,
) -> dict[str, Any]:
    """One rollout's request body: the row, run-level overrides, the seed and the stamps.

    An episode row names no agent: it is stamped with the environment server it runs on, and
    takes no run-level ``responses_create_params`` or seed (its request carries neither).
    ``via_server``: a flat row sent through the environment server ``agent``, its ``agent_ref``
    naming ``server_agent``, the agent the server runs it on, when that is known (the routing checked
    that a row naming an agent names that one), else kept as it is. It is stamped with the server
    when ``stamp_server`` (legacy routing, as NeMo Gym's ``_environment_server_for_config_row``);
    routed by its agent it is not: NeMo Gym picks the server at dispatch and stamps only the result.
    ``agent`` None leaves the row's routing as it is, for the run to resolve.
    """
    out = dict(row)
    params = out.get(CREATE_PARAMS)
    if (create_params or add_seed) and not episode:
        params = {**(params if isinstance(params, dict) else {}), **create_params}
        if add_seed:
            params["metadata"] = _with_seed(params.get("metadata"), rollout_index)
        out[CREATE_PARAMS] = params
    named = agent
    if (episode or via_server) and agent is not None:
        if episode or stamp_server:
            out[ENVIRONMENT_SERVER] = agent
        named = server_agent if via_server else None
    if named is not None:
        ref = out.get("agent_ref")
        out["agent_ref"] = {**ref, "name": named} if isinstance(ref, dict) else {"name": named}
    out.pop(ATTEMPT_INDEX, None)
    out[TASK_INDEX] = task_index
    out[ROLLOUT_INDEX] = rollout_index
    return out


def _with_seed(metadata: Any, rollout_index: int) -> dict[str, Any]:
    """NeMo Gym carries the seed as a JSON *string* in ``metadata.extra_body``; keep that shape."""
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    extra = metadata.get("extra_body")
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except ValueError:
            extra = None
    extra = dict(extra) if isinstance(extra, dict) else {}
    extra["seed"] = rollout_index
    metadata["extra_body"] = json.dumps(extra)
    return metadata


def rollout_order(counts: Sequence[tuple[int, int]], interleave: bool) -> Iterator[tuple[int, int]]:
    """``(item position, rollout index)`` in dispatch order: a a b b, or a b a b when interleaved.

    ``counts`` holds each item's first rollout index and its repeats: an item is one row on
    one agent, and a fanned-out row's items number their rollouts on from one another.
    """
    if interleave:
        for round_index in range(max((n for _, n in counts), default=0)):
            for position, (first, repeats) in enumerate(counts):
                if round_index < repeats:
                    yield position, first + round_index
    else:
        for position, (first, repeats) in enumerate(counts):
            for rollout_index in range(first, first + repeats):
                yield position, rollout_index
