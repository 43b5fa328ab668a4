"""A session's run scored once, from the files on disk, where the run is owned (never on an xdist worker).

Out of ``session.py``, which runs the dispatch: scoring reads what dispatch left, through the same
``score_configured`` as the Python API, with this session's read-ahead of the outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_rollouts.pytest.session import RolloutRun
    from pytest_rollouts.scoring.aggregate import RunScore


def score_session(
    run: RolloutRun,
    perf_summary: dict[str, Any] | None = None,
    drained: frozenset[tuple[int, int]] = frozenset(),
    *,
    coverage_only: bool = False,
) -> RunScore | None:
    """Coverage and metrics from the files on disk, once per run.

    ``coverage_only``: a run stopped by the user is not scored, but says what it covered.
    """
    from pytest_rollouts.lifecycle.refusal import Refusal

    paths = run.paths
    if not paths.materialized.exists():
        if (
            run.began() and not run.workers.taken_back
        ):  # it wrote them: removed since, and what the score counts against
            raise pytest.UsageError(
                f"cannot score the run: its materialized inputs {run.shown(paths.materialized)} were "
                "removed while it ran; restore them and --rollouts-resume, or start afresh"
            )
        return None
    try:
        return run.life.score(
            run.settings,
            agent_url=lambda name: _metrics_url(run, name),
            coverage_only=coverage_only,
            perf_summary=perf_summary,
            outputs=None if run.read_ahead is None else run.read_ahead.scan,
            drained=drained,
            trace=run.trace,
            dispatch=run.run_dispatch_record().by_agent(),
        )
    except Refusal as refusal:
        raise pytest.UsageError(str(refusal)) from None


def scoring_interrupted(run: RolloutRun) -> str:
    """Scoring was stopped part-way. A metrics file an earlier session of the run left would
    now contradict its rows, so it goes; every row stays, and a resume scores them."""
    run.life.withdraw_conclusions()
    return (
        "Interrupted while scoring: no metrics file written; "
        "--rollouts-resume scores the run (none with a row is sent again)"
    )


def _metrics_url(run: RolloutRun, name: str) -> str | None:
    """Where a group's ``/aggregate_metrics`` lives; None (local metrics) for an agent not configured now."""
    try:
        if run.agents.is_model(name, run.recorded_datasets):
            return None
        return run.agent_urls({name})[name]
    except pytest.UsageError:
        return None
