"""Score a run as its settings ask: the scoring policies, metrics or not, headers and timeout for
``/aggregate_metrics``. One call for the pytest session and the Python API, so they cannot drift."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_rollouts.config.settings import Settings
from pytest_rollouts.net.auth import headers_for
from pytest_rollouts.pacing import paced
from pytest_rollouts.rows.planned import Key
from pytest_rollouts.scoring.accounting import ScoringPolicy
from pytest_rollouts.scoring.aggregate import RunScore, score_run
from pytest_rollouts.scoring.intervals import RewardRange
from pytest_rollouts.scoring.output_scan import OutputScan
from pytest_rollouts.scoring.run_statistics import StatisticsOptions
from pytest_rollouts.scoring.server_metrics import MetricsPost
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import JsonlError

if TYPE_CHECKING:
    from pytest_rollouts.scoring.compare_runs import RunComparison


def score_configured(
    paths: ArtifactPaths,
    settings: Settings,
    *,
    agent_url: Callable[[str], str | None],
    coverage_only: bool = False,
    perf_summary: dict[str, Any] | None = None,
    outputs: OutputScan | None = None,
    drained: frozenset[Key] = frozenset(),
    dispatch: Mapping[str, Mapping[str, Any]] | None = None,
    post: MetricsPost | None = None,
) -> RunScore:
    """``coverage_only``: a run stopped by the user is not scored, but says what it covered.
    ``post`` sends ``/aggregate_metrics`` (``score_run``). Raises ``JsonlError`` for a row that cannot be read."""
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
            dispatch=dispatch,
            post=post,
            statistics=statistics_options(settings),
            baseline=None if coverage_only else compare_with_baseline(settings),
        )


def statistics_options(settings: Settings) -> StatisticsOptions:
    """The statistics a run's settings ask for."""
    return StatisticsOptions(RewardRange(*settings.reward_range), settings.pass_k, settings.group_by)


def compare_with_baseline(settings: Settings) -> RunComparison | str | None:
    """This run against ``--rollouts-baseline``, gated by ``--rollouts-max-regression``: the
    comparison, the reason it cannot be made, or None without a baseline (and then the
    comparison's machinery is not imported)."""
    if settings.baseline is None or settings.out is None:
        return None
    from pytest_rollouts.scoring.compare_runs import compare_runs
    from pytest_rollouts.scoring.pairing import PairingError
    from pytest_rollouts.scoring.regression import RegressionGate

    gate = None
    if settings.max_regression is not None:
        gate = RegressionGate(
            settings.max_regression,
            settings.source_of("max_regression"),
            settings.gate_scored_only,
            settings.source_of("gate_scored_only"),
        )
    try:
        return compare_runs(
            settings.baseline,
            settings.out,
            allow_partial=True,
            reward_range=RewardRange(*settings.reward_range),
            gate=gate,
            correction=settings.correction,
            sequential_test=settings.sequential,
        )
    except (PairingError, JsonlError) as exc:
        return f"cannot compare with {settings.source_of('baseline')} {settings.baseline}: {exc}"
