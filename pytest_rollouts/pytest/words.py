"""The status word a rollout item's report shows: its failure class, or its rewards.

Apart from the reporter (``pytest/terminal.py``), which every pytest session registers: it imports
this module only once the session shows a rollout, so a session without datasets loads none of
what the words are read from.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from pytest_rollouts.pytest.loop import SPENT
from pytest_rollouts.pytest.properties import CACHED, MASKED, REWARDS, rollout_properties
from pytest_rollouts.pytest.tally import unscored
from pytest_rollouts.rows.records import dominant_class

# pytest's own report categories; a failure class of the same name would be miscounted
# (and crash the ``-rs`` summary, which expects real skips), so it is shown prefixed.
PYTEST_CATEGORIES = frozenset(
    {"passed", "failed", "skipped", "error", "xfailed", "xpassed", "deselected", "warnings", "rerun"}
)
# A passed (or skipped: drained) rollout item while the loop runs: no letter, and no reward list
# formatted for a word only -v shows (one is needed all the same: pytest counts progress by
# items with one).
QUIET_PASSED = ("passed", "", "PASSED")
QUIET_SKIPPED = ("skipped", "", "SKIPPED")


def teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    """Failed rollouts report under their class, so the summary reads ``3 agent_run_error``; results
    without a reward under ``no_reward``."""
    props = rollout_properties(report)
    if props is None:
        return None
    failing = unscored(props)
    if report.failed and failing:
        category = dominant_class(failing)
        if category in PYTEST_CATEGORIES:
            category = "rollout_" + category
        return category, "F", category.upper()
    if report.passed:
        rewards = " ".join(_fmt(r) for r in props.get(REWARDS, ()))
        masked = f"; {props[MASKED]} masked" if MASKED in props else ""
        cached = f"; {props[CACHED]} cached" if CACHED in props else ""
        return "passed", ".", f"PASSED (reward {rewards}{masked}{cached})"
    return None


def slim(report: pytest.TestReport) -> None:
    """Drop what nothing reads once a passed rollout report is logged (trylast: everyone has seen it).

    The terminal reporter keeps every report to the end; at 100k items their keyword dicts
    and property lists are ~60 MB, their emptied lists 11 MB more. (pytest copies the item's
    property list into the report; the lean loop drops the item's.) junitxml reads properties
    later, so runs with it keep them.
    """
    report.keywords = _NO_KEYWORDS
    # An empty list of its own is 56 bytes a report: the shared empty tuple reads the same, and
    # nothing appends to a report once every plugin has logged it.
    report.user_properties = SPENT  # type: ignore[assignment]
    if not report.sections:
        report.sections = SPENT  # type: ignore[assignment]


_NO_KEYWORDS: Mapping[str, Any] = MappingProxyType({})


def _fmt(reward: float | None) -> str:
    return "-" if reward is None else f"{reward:g}"
