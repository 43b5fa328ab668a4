"""An item's rollout results as report properties: they travel with each report, from xdist
workers to the controller and into junitxml and report logs, so every reader shares these names."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from pytest_rollouts.rows.records import RolloutOutcome
from pytest_rollouts.rows.schema import CANCELLED

REWARDS = "rollouts_rewards"
ELAPSED = "rollouts_elapsed"
CACHED = "rollouts_cached"
FAILURES = "rollouts_failures"
# How many of an item's results were masked (``mask_sample``), and how many carried no numeric
# reward: neither is scored, and only the second fails the item.
MASKED = "rollouts_masked"
NO_REWARD = "rollouts_no_reward"
# [task, rollout] of each rollout the dispatch budget did not start: written nowhere, so the
# score learns them from the reports alone.
DRAINED = "rollouts_drained"
# How many of an item's rollouts the attempt cap now keeps from any resume.
GIVEN_UP = "rollouts_given_up"
# How many of its failures were written nowhere (NeMo Gym's ``omitted``: ``_ng_no_persist``, drained);
# the others in ``FAILURES`` are in the sidecar (``failed``). The masking view needs the split.
OMITTED = "rollouts_omitted"
ROLLOUT_PROPERTIES = frozenset({REWARDS, ELAPSED, CACHED, FAILURES, MASKED, NO_REWARD, DRAINED, GIVEN_UP, OMITTED})


def record_outcomes(
    user_properties: list[tuple[str, object]], outcomes: Sequence[RolloutOutcome], task_index: int
) -> list[RolloutOutcome]:
    """Put an item's rollout results where reports (and junitxml) carry them; the outcomes that
    fail the item (those with a ``status``: a failure class, or a result without a reward).

    One pass over the outcomes: this runs for every item, and most items have nothing but results.
    """
    rewards, elapsed, failed, drained = [], [], [], []
    unscored: list[RolloutOutcome] = []
    cached = masked = unrewarded = given_up = omitted = 0
    for o in outcomes:
        rewards.append(o.reward)
        if o.attempts and not o.cached:
            elapsed.append(round(o.elapsed, 6))
        cached += o.cached
        masked += o.masked
        given_up += o.given_up
        if o.failure_class is None:
            if o.reward is None and not o.masked:  # its status is NO_REWARD
                unrewarded += 1
                unscored.append(o)
            continue
        unscored.append(o)
        failed.append(o.failure_class)
        omitted += not o.persisted
        if o.failure_class == CANCELLED:
            drained.append([task_index, o.rollout_index])
    user_properties.append((REWARDS, rewards))
    user_properties.append((ELAPSED, elapsed))
    if unscored or cached or masked or given_up:  # any count to tell: most items have none
        counts: tuple[tuple[str, object], ...] = (
            (CACHED, cached),
            (FAILURES, dict(Counter(failed)) if failed else None),
            (MASKED, masked),
            (NO_REWARD, unrewarded),
            (DRAINED, drained),
            (GIVEN_UP, given_up),
            (OMITTED, omitted),
        )
        user_properties.extend([(name, value) for name, value in counts if value])
    return unscored


def json_property(name: str, value: object) -> object:
    """One of this plugin's properties as JSON text; anyone else's as it is."""
    return orjson.dumps(value).decode() if name in ROLLOUT_PROPERTIES else value


def rollout_properties(report: pytest.TestReport) -> dict[str, Any] | None:
    if report.when != "call" or not report.user_properties:
        return None
    props = {k: v for k, v in report.user_properties if k in ROLLOUT_PROPERTIES}
    return props or None
