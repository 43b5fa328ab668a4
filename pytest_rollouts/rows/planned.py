"""What a run dispatches: each materialized rollout and where its request body sits, and what
earlier runs already settled (on resume).

Planning makes these from dataset rows; dispatch reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pytest_rollouts.rows.records import RolloutOutcome

# A rollout's key: (task index, rollout index).
Key = tuple[int, int]


@dataclass(slots=True)
class PlannedRollout:
    """One materialized rollout: its identity and where its request body sits on disk."""

    slot: int
    task_index: int
    rollout_index: int
    agent: str
    offset: int
    length: int
    first_attempt: int = 0
    episode: bool = False
    # A flat row sent through an environment server (stamped with it in its materialized row).
    via_server: bool = False


@dataclass
class Plan:
    """What this session dispatches, and what earlier runs already settled (on resume)."""

    rollouts: list[PlannedRollout]
    slots: int
    prior: dict[int, list[RolloutOutcome]] = field(default_factory=dict)
    # Every materialized row by its group (``records.metrics_group``) and key, and its offset:
    # what scoring counts against.
    expected: dict[str, Mapping[Key, int]] = field(default_factory=dict)
