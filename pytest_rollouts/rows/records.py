"""The small outcome pytest sees of a rollout, and what is read off a stored row.

The full reply goes to disk (as ``schema.py`` builds its row) and is dropped; only ``RolloutOutcome`` (a reward or a
failure class) stays in memory until the item reports, which is what keeps a
100k-row run's memory flat.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.schema import ENVIRONMENT_SERVER, FAILURE_CLASS, TERMINAL, agent_class

EMPTY: Mapping[str, str] = MappingProxyType({})

# A result whose reply carried no numeric reward: kept in the output as the agent sent it, but
# no score. It is an outcome of its own (an item's status word, the tallies, the coverage), not a
# failure class: no row of it goes to the failures file, and resume does not send it again.
NO_REWARD = "no_reward"


def metrics_group(row: Mapping[str, Any], fronted_by: Mapping[str, str] = EMPTY) -> str:
    """The name a rollout is sent to and scored under (NeMo Gym's ``_metrics_group``): the environment
    server stamped on its row, else the one ``fronted_by`` puts in front of its agent, else its agent.

    A flat row routed by its agent is materialized unstamped, naming the agent, as NeMo Gym writes it
    (whose resume looks a stamp up in its own config); its result is stamped with the server it went
    through. ``fronted_by`` (``plan.build.fronted_by``, recorded in the run's manifest) puts both in one
    group. An episode row names no agent: its stamp is what ran it, whatever ``agent_ref`` it carries.
    """
    server = row.get(ENVIRONMENT_SERVER)
    if server:
        return str(server)
    ref = row.get("agent_ref")
    name = str(ref["name"]) if isinstance(ref, Mapping) and ref.get("name") else ""
    return fronted_by.get(name, name)


@datatype(slots=True)
class Failure:
    """Why an attempt produced no score, in the sidecar's vocabulary: a transport's, an agent's, or
    the built-in model agent's (``model/agent.py``), which the dispatcher writes alike."""

    failure_class: str
    type: str
    message: str
    http_status: int | None = None
    body: str | None = None
    retryable: bool = False
    retry_after: float | None = None


@datatype(slots=True)
class RolloutOutcome:
    """What pytest keeps of one rollout: a result (its reward, or ``masked``) or a failure class."""

    rollout_index: int
    # The result's reward; None for a failure, a masked result and a result without a numeric one.
    reward: float | None
    failure_class: str | None
    detail: str
    elapsed: float
    # HTTP tries this run made (0: not sent, or settled from disk).
    attempts: int
    cached: bool = False
    # Its failure used the last attempt the cap allows: no resume sends it again unless the cap is raised.
    given_up: bool = False
    # A result the agent marked ``mask_sample``: left out of every score, as NeMo Gym does.
    masked: bool = False
    # False for a failure written nowhere (an agent's ``_ng_no_persist``, a drained rollout): NeMo
    # Gym's ``omitted``, where a failure in the sidecar is ``failed`` (``rows/masking.py``).
    persisted: bool = True
    # When its recorded try was sent, in seconds since the epoch (0.0: never sent): with ``elapsed``,
    # where its tracing span sits (``export/tracing.py``), drawn where the outcome arrives.
    started: float = 0.0

    @classmethod
    def of_result(
        cls,
        rollout_index: int,
        row: Mapping[str, Any],
        elapsed: float,
        attempts: int,
        *,
        cached: bool = False,
        started: float = 0.0,
    ) -> RolloutOutcome:
        """A result row's outcome: masked, scored with its reward, or without a reward."""
        masked = is_masked(row)
        reward = None if masked else reward_of(row)
        return cls(rollout_index, reward, None, "", elapsed, attempts, cached=cached, masked=masked, started=started)

    @property
    def status(self) -> str | None:
        """Why this rollout is not scored: its failure class, ``NO_REWARD``; None when it is
        scored or masked (the agent's own choice, which fails nothing)."""
        if self.failure_class is not None:
            return self.failure_class
        return NO_REWARD if self.reward is None and not self.masked else None


def is_masked(row: Mapping[str, Any]) -> bool:
    """NeMo Gym's ``mask_sample``: any true value."""
    return bool(row.get("mask_sample"))


def failure_class_of(reply: Mapping[str, Any]) -> str | None:
    """The failure class an agent put on its reply, if it put one (a non-empty string).

    An agent may send the key on every reply, null on success: that is a result, not a failure.
    """
    value = reply.get(FAILURE_CLASS)
    return agent_class(value) if isinstance(value, str) and value else None


def marked_terminal(row: Mapping[str, Any]) -> bool:
    """Only a real ``true``: the flag is stored as the agent returned it, whatever its type."""
    return row.get(TERMINAL) is True


def dominant_class(counts: Mapping[str, int]) -> str:
    """The class an item reports under: its most frequent failure, ties broken by name."""
    return min(counts, key=lambda name: (-counts[name], name))


def reward_of(reply: Mapping[str, Any]) -> float | None:
    """The reply's reward, None when it has no finite numeric one: NaN (a missing value to the
    metrics, as to NeMo Gym's pandas), an infinity (a mean of inf passed every gate) and an
    integer beyond float range included."""
    value = reply.get("reward")
    if not isinstance(value, (int, float)):
        return None
    try:
        reward = float(value)
    except OverflowError:
        return None
    return reward if math.isfinite(reward) else None
