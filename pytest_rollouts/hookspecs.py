"""Hooks pytest-rollouts offers to conftest files and other plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_rollouts.pytest.items import RolloutItem
    from pytest_rollouts.rows.records import RolloutOutcome


@pytest.hookspec
def pytest_rollouts_task_finished(item: RolloutItem, outcomes: list[RolloutOutcome]) -> None:
    """Every rollout of ``item`` has finished (scored or failed) and is on disk.

    Called in pytest's main thread, in item order, before the item reports; use it to
    stream results to a dashboard. ``outcomes`` are sorted by rollout index.
    """
