"""Episode (taskset) rows: NeMo Gym's native task format, sent to an environment server.

A row with ``task_id.taskset`` and ``task_input`` is not a ``/run`` body an agent
accepts as is: it goes to the environment server its taskset routes to as
``{"episode_id": {"rollout_id", "attempt"}, "task": {"task_id", "task_input"}}`` and is
answered ``{episode_id, task_id, result | failure}``. The materialized row keeps the
whole dataset row (the resume source of truth); the episode body is built from it at
send time. A ``result`` is stored as the server returned it; a ``failure`` becomes a
sidecar row of class ``environment_server_failed``, terminal when the server says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_rollouts.rows.records import failure_class_of
from pytest_rollouts.rows.schema import (
    ENVIRONMENT_SERVER_FAILED,
    FAILURE_CLASS,
    FAILURE_MESSAGE,
    FAILURE_PREFIX,
    FAILURE_RESPONSE_BODY,
    FAILURE_TYPE,
    MAX_BODY_CHARS,
    TASK_ID,
    TERMINAL,
    collector_keys_message,
    result_collector_keys,
)
from pytest_rollouts.store.jsonl import dumps

if TYPE_CHECKING:
    from pytest_rollouts.net.auth import Redactor


def taskset_of(row: Mapping[str, Any]) -> str | None:
    """The taskset of an episode row, or None for a flat row."""
    task_id = row.get("task_id")
    if task_id is None:  # a flat row (most are): asked of every row of a plan, no Mapping check
        return None
    if not isinstance(task_id, Mapping) or "task_input" not in row:
        return None
    taskset = task_id.get("taskset")
    return taskset if isinstance(taskset, str) and taskset else None


def episode_body(row: Mapping[str, Any], task_index: int, rollout_index: int, attempt_index: int) -> bytes:
    """The request an environment server gets; the rollout id never carries the attempt.

    The id is this run's own ``<task>-<rollout>``: an id copied from the dataset would be the
    same for every repeat and fan-out copy of the row.
    """
    return dumps(
        {
            "episode_id": {"rollout_id": f"{task_index}-{rollout_index}", "attempt": attempt_index},
            "task": {"task_id": row["task_id"], "task_input": row["task_input"]},
        }
    )


def episode_reply(reply: dict[str, Any], task_id: Any, redact: Redactor) -> dict[str, Any]:
    """An episode reply as the row we store: its ``result``, or its ``failure`` in sidecar terms.

    The failure's texts are cut to the sidecar's size through ``redact``, which redacts them first.

    Anything else (not episode-shaped, neither a result object nor a failure, or a result that
    uses the collector's keys) is an ``environment_server_failed`` that resume retries, never a
    result without a score.
    """
    if failure_class_of(reply) is not None:  # a failure the server classified itself, as any agent may
        return reply
    shaped = isinstance(reply.get("episode_id"), Mapping) and isinstance(reply.get("task_id"), Mapping)
    failure = reply.get("failure") if shaped else None
    if isinstance(failure, Mapping):
        # Its shape is the server's own: the whole object is kept, as any agent's reply body is.
        text = dumps(failure, default=str).decode()
        said = next((failure[key] for key in ("failure_reason", "message", "error") if failure.get(key)), text)
        row = {
            TASK_ID: task_id,
            FAILURE_CLASS: ENVIRONMENT_SERVER_FAILED,
            TERMINAL: failure.get("terminal") is True,
            FAILURE_TYPE: "EpisodeFailure",
            FAILURE_MESSAGE: redact.cut(str(said), MAX_BODY_CHARS),
            FAILURE_RESPONSE_BODY: redact.cut(text, MAX_BODY_CHARS),
        }
        for key in ("stage", "partial_response"):
            if key in failure:
                row[FAILURE_PREFIX + key] = failure[key]
        return row
    result = reply.get("result") if shaped else None
    if not isinstance(result, Mapping):
        said = "not an episode reply: no episode_id and task_id objects with a result object or a failure"
        return _invalid(task_id, "InvalidEpisodeReply", said)
    # NeMo Gym refuses these too: the collector adds its own keys, and a result's would pass for them.
    reserved = result_collector_keys(result)
    if reserved:
        return _invalid(task_id, "CollectorKeys", collector_keys_message(reserved))
    return {**result, TASK_ID: task_id}


def _invalid(task_id: Any, failure_type: str, message: str) -> dict[str, Any]:
    """A reply that is no episode result the collector can store: a failure resume retries."""
    return {
        TASK_ID: task_id,
        FAILURE_CLASS: ENVIRONMENT_SERVER_FAILED,
        TERMINAL: False,
        FAILURE_TYPE: failure_type,
        FAILURE_MESSAGE: message,
    }
