"""The small outcome pytest sees of a rollout, and what is read off a stored row.

The full reply goes to disk (as ``schema.py`` builds its row) and is dropped; only ``RolloutOutcome`` (a reward or a
failure class) stays in memory until the item reports, which is what keeps a
100k-row run's memory flat.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_rollouts.rows.schema import ENVIRONMENT_SERVER, FAILURE_CLASS, TERMINAL


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
