"""A group's ``masking`` entry in the metrics file: the run's end as the live masking view saw it going.

NeMo Gym exports ``_masking_step_metrics`` only while a run goes; the metrics file keeps the same keys
(``progress/<group>/reward_unmasked``, ``masked_pct``, ``failed``, ``omitted``) for the whole run,
counted from the files on disk (``rows/masking.py`` says what each one is). At the end, ``omitted``
is every rollout that left no row at all: drained, written nowhere by the agent, or never finished.
"""

from __future__ import annotations

from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.rows.schema import CANCELLED
from pytest_rollouts.scoring.accounting import Coverage
from pytest_rollouts.scoring.columns import RolloutColumns

MASKING = "masking"


def masking_metrics(name: str, coverage: Coverage, rows: RolloutColumns) -> dict[str, float]:
    """The group's masking metrics, {} when nothing was masked or dropped. ``rows``: its real result
    rows (not the zeros the policies add), the unrewarded ones without a ``reward``."""
    failed = sum(n for cls, n in coverage.failed_by_class.items() if cls != CANCELLED)
    omitted = coverage.failed_by_class[CANCELLED] + coverage.outcomes().no_row
    if not (coverage.masked or failed or omitted):  # healthy: nothing to say, no rewards to read
        return {}
    rewards = rows.field("reward")
    return MaskingCounts(len(rewards), sum(rewards), coverage.masked, failed, omitted).step_metrics(name)
