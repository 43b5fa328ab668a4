"""Score a run as its settings ask: the scoring policies, metrics or not, headers and timeout for
``/aggregate_metrics``. One call for the pytest session and the Python API, so they cannot drift."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_rollouts.config.settings import Settings
from pytest_rollouts.net.auth import headers_for
from pytest_rollouts.pacing import paced
from pytest_rollouts.rows.plan import Key
from pytest_rollouts.scoring.accounting import ScoringPolicy
from pytest_rollouts.scoring.aggregate import OutputScan, RunScore, score_run
from pytest_rollouts.store.artifacts import ArtifactPaths


def score_configured(
    paths: ArtifactPaths,
    settings: Settings,
    *,
    agent_url: Callable[[str], str | None],
    coverage_only: bool = False,
    perf_summary: dict[str, Any] | None = None,
    outputs: OutputScan | None = None,
    drained: frozenset[Key] = frozenset(),
) -> RunScore:
    """``coverage_only``: a run stopped by the user is not scored, but says what it covered.
    Raises ``JsonlError`` for a row that cannot be read."""
    policy = ScoringPolicy(settings.count_as_zero, settings.count_missing_as_zero)
    with paced():
        return score_run(
            paths,
            policy,
            agent_url=agent_url,
            agent_headers=lambda name: headers_for(settings.agent_header, name),
            write_metrics=not (settings.no_aggregate or coverage_only),
            timeout=settings.timeout,
            perf_summary=perf_summary,
            outputs=outputs,
            drained=drained,
        )
