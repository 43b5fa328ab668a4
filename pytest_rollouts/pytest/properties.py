"""An item's rollout results as report properties: they travel with each report, from xdist
workers to the controller and into junitxml and report logs, so every reader shares these names."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from pytest_rollouts.rows.records import NO_REWARD as NO_REWARD_STATUS
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
) -> None:
    """Put an item's rollout results where reports (and junitxml) carry them."""
    user_properties.append((REWARDS, [o.reward for o in outcomes]))
    user_properties.append((ELAPSED, [round(o.elapsed, 6) for o in outcomes if o.attempts and not o.cached]))
    cached = sum(o.cached for o in outcomes)
    if cached:
        user_properties.append((CACHED, cached))
    failed = [o.failure_class for o in outcomes if o.failure_class is not None]
    if failed:
        user_properties.append((FAILURES, dict(Counter(failed))))
    masked = sum(o.masked for o in outcomes)
    if masked:
        user_properties.append((MASKED, masked))
    unrewarded = sum(o.status == NO_REWARD_STATUS for o in outcomes)
    if unrewarded:
        user_properties.append((NO_REWARD, unrewarded))
    drained = [[task_index, o.rollout_index] for o in outcomes if o.failure_class == CANCELLED]
    if drained:
        user_properties.append((DRAINED, drained))
    given_up = sum(o.given_up for o in outcomes)
    if given_up:
        user_properties.append((GIVEN_UP, given_up))
    omitted = sum(o.failure_class is not None and not o.persisted for o in outcomes)
    if omitted:
        user_properties.append((OMITTED, omitted))


def json_property(name: str, value: object) -> object:
    """One of this plugin's properties as JSON text; anyone else's as it is."""
    return orjson.dumps(value).decode() if name in ROLLOUT_PROPERTIES else value


def rollout_properties(report: pytest.TestReport) -> dict[str, Any] | None:
    if report.when != "call" or not report.user_properties:
        return None
    props = {k: v for k, v in report.user_properties if k in ROLLOUT_PROPERTIES}
    return props or None
