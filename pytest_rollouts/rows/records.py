"""The rows a rollout leaves on disk, and the small outcome pytest sees.

The full reply goes to disk and is dropped; only ``RolloutOutcome`` (a reward or a
failure class) stays in memory until the item reports, which is what keeps a
100k-row run's memory flat.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_rollouts.dispatch.client import Attempt, Failure


FAILURE_CLASS = "_ng_failure_class"
CANCELLED = "cancelled"
ELAPSED = "elapsed_seconds"
TERMINAL = "_ng_failure_terminal"
NO_PERSIST = "_ng_no_persist"
ALWAYS_TERMINAL = frozenset({"skipped"})
# On a failure row: the tries of the same attempt before the one the row describes (HTTP retries
# within one run), oldest first. An attempt is one run's dispatch of a rollout, and resume caps
# attempts, so these tries are summarised here rather than written as rows of their own.
EARLIER_TRIES = "_ng_earlier_tries"
ENVIRONMENT_SERVER = "_ng_environment_server"
# A failure's response body is kept up to this many characters (NeMo Gym's cut).
MAX_BODY_CHARS = 2000


def routing_identity(row: Mapping[str, Any]) -> str:
    """The agent a rollout ran on or, for an episode row (which names none), its environment server.

    A materialized row, its result and its sidecar row all carry the same one.
    """
    server = row.get(ENVIRONMENT_SERVER)
    if server:  # an episode row may still carry its dataset's agent_ref: the stamp is what ran it
        return str(server)
    ref = row.get("agent_ref")
    return str(ref["name"]) if isinstance(ref, Mapping) and ref.get("name") else ""


@dataclass(slots=True)
class RolloutOutcome:
    rollout_index: int
    reward: float | None
    failure_class: str | None
    detail: str
    elapsed: float
    # HTTP tries this run made (0: not sent, or settled from disk).
    attempts: int
    cached: bool = False
    # Its failure used the last attempt the cap allows: no resume sends it again unless the cap is raised.
    given_up: bool = False

    @property
    def scored(self) -> bool:
        return self.failure_class is None


def success_row(reply: dict[str, Any], stamps: dict[str, Any], elapsed: float) -> dict[str, Any]:
    return {**reply, **stamps, ELAPSED: round(elapsed, 6)}


def failure_row(failure: Failure, stamps: dict[str, Any], elapsed: float, earlier: Sequence[Attempt]) -> dict[str, Any]:
    return {**stamps, **failure.fields(), ELAPSED: round(elapsed, 6), EARLIER_TRIES: earlier_tries(earlier)}


def agent_failure_row(
    reply: dict[str, Any], stamps: dict[str, Any], elapsed: float, http_status: int | None, earlier: Sequence[Attempt]
) -> dict[str, Any]:
    """A reply the agent itself classified: stored as returned, with our stamps and defaults."""
    row = {**reply, **stamps, ELAPSED: round(elapsed, 6), EARLIER_TRIES: earlier_tries(earlier)}
    row.setdefault("_ng_failure_type", "AgentReported")
    row.setdefault("_ng_failure_message", str(reply.get("failure_reason") or ""))
    row.setdefault("_ng_failure_http_status", http_status)
    row.setdefault("_ng_failure_response_body", None)
    if reply[FAILURE_CLASS] in ALWAYS_TERMINAL:
        row[TERMINAL] = True
    else:
        row.setdefault(TERMINAL, False)
    return row


def earlier_tries(earlier: Sequence[Attempt]) -> list[dict[str, Any]]:
    """What each earlier try got, without its message or body: the row's own are the ones that stand,
    and a list (not a count) is no number the default metrics would average for a counted failure."""
    tries = []
    for attempt in earlier:
        failure = attempt.failure
        assert failure is not None  # only a try without a reply is tried again
        tries.append(
            {
                FAILURE_CLASS: failure.failure_class,
                "_ng_failure_type": failure.type,
                "_ng_failure_http_status": failure.http_status,
                ELAPSED: round(attempt.elapsed, 6),
            }
        )
    return tries


def failure_class_of(reply: Mapping[str, Any]) -> str | None:
    """The failure class an agent put on its reply, if it put one (a non-empty string).

    An agent may send the key on every reply, null on success: that is a result, not a failure.
    """
    value = reply.get(FAILURE_CLASS)
    return value if isinstance(value, str) and value else None


def marked_terminal(row: Mapping[str, Any]) -> bool:
    """Only a real ``true``: the flag is stored as the agent returned it, whatever its type."""
    return row.get(TERMINAL) is True


def dominant_class(counts: Mapping[str, int]) -> str:
    """The class an item reports under: its most frequent failure, ties broken by name."""
    return min(counts, key=lambda name: (-counts[name], name))


def reward_of(reply: dict[str, Any]) -> float | None:
    """The reply's reward, None when it has no numeric one: NaN (a missing value to the metrics, as
    to NeMo Gym's pandas) and an integer beyond float range included."""
    value = reply.get("reward")
    if not isinstance(value, (int, float)):
        return None
    try:
        reward = float(value)
    except OverflowError:
        return None
    return None if math.isnan(reward) else reward
