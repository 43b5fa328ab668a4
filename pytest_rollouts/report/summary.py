"""The report's numbers about the whole run, from scoring's own objects: the coverage and its
denominators, each group's metrics, the gates' lines and the baseline comparison.

Nothing is recomputed here. A session hands its ``RunScore`` and ``Verdict`` as they are; the
``report`` command rebuilds them from the files (``score_from_files``): the coverage and metrics
the run wrote into its metrics file, the gates judged by ``judge_run`` as at the run's end.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pytest_rollouts.rows.records import NO_REWARD
from pytest_rollouts.scoring.accounting import Coverage, ScoringPolicy
from pytest_rollouts.scoring.aggregate import GroupScore, RunScore, score_run
from pytest_rollouts.scoring.compare_runs import RunComparison, compare_runs
from pytest_rollouts.scoring.gate import Gate
from pytest_rollouts.scoring.metrics_shape import without_odd_values
from pytest_rollouts.scoring.pairing import PairingError
from pytest_rollouts.scoring.summary import score_lines
from pytest_rollouts.scoring.verdict import RunEnd, Verdict, judge_run
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import JsonlError, loads

# Metrics entries' keys the report leaves out: per-task entries (the table has the rollouts) and
# what it shows from elsewhere.
LEFT_OUT = frozenset({"agent_ref", "group_level_metrics", "coverage", "metrics_source", "metrics_note"})


def score_from_files(out: Path, gate: Gate, baseline: Path | None = None) -> tuple[RunScore, Verdict]:
    """The run's score as its end had it: each group's coverage and metrics from its metrics file
    (the scoring policies it ran with included), else the coverage scored from the rows under the
    default policy, without metrics; the comparison with ``baseline``; the verdict of ``gate``."""
    paths = ArtifactPaths(out)
    score = _from_metrics_file(paths) if paths.metrics.is_file() else None
    if score is None:  # --rollouts-no-aggregate, or a run stopped before its metrics
        score = score_run(paths, ScoringPolicy(), agent_url=lambda name: None, write_metrics=False, timeout=1.0)
    if baseline is not None:
        score.baseline = comparison(baseline, out)
    return score, judge_run(score, RunEnd(), gate)


def _from_metrics_file(paths: ArtifactPaths) -> RunScore | None:
    """The score the run wrote: each group's metrics and coverage; None when an entry has no coverage."""
    try:  # the one decoder the run wrote it for: a NaN a server sent, or an infinite mean, is read back
        entries = loads(paths.metrics.read_bytes())
    except ValueError as exc:
        raise JsonlError(f"{paths.metrics}: not valid JSON ({exc})") from None
    groups, total = [], Coverage()
    for entry in entries if isinstance(entries, list) else []:
        coverage = _coverage(entry.get("coverage")) if isinstance(entry, dict) else None
        if coverage is None:
            return None
        metrics, odd = without_odd_values({k: v for k, v in entry.items() if k not in LEFT_OUT})
        name = str((entry.get("agent_ref") or {}).get("name", ""))
        source, note = str(entry.get("metrics_source", "file")), str(entry.get("metrics_note", ""))
        if odd:
            note = "; ".join([*filter(None, [note]), f"left out of the metrics file: {'; '.join(odd)}"])
        groups.append(GroupScore(name, coverage, metrics, source, note))
        total += coverage
    return RunScore(groups, total, metrics_path=paths.metrics)


def comparison(baseline: Path, out: Path) -> RunComparison | str:
    """The run against ``baseline`` as ``--rollouts-baseline`` compares them (tasks only one run has
    left out), or why they cannot be compared."""
    try:
        return compare_runs(baseline, out, allow_partial=True)
    except (PairingError, JsonlError) as exc:
        return f"cannot compare with {baseline}: {exc}"


def _coverage(entry: Any) -> Coverage | None:
    """A metrics entry's ``coverage`` back as scoring's ``Coverage`` (``failed_by_class`` there
    adds the results without a reward, which ``Coverage`` keeps apart)."""
    if not isinstance(entry, dict):
        return None
    failed = Counter(entry.get("failed_by_class") or {})
    failed.pop(NO_REWARD, None)
    names = ("expected", "completed", "masked", "unrewarded", "counted_as_zero", "imputed_zero")
    return Coverage(
        *(int(entry.get(name) or 0) for name in names),
        missing_by_class=Counter(entry.get("missing_by_class") or {}),
        failed_by_class=failed,
    )


def summary(score: RunScore, verdict: Verdict, out: Path) -> dict[str, Any]:
    """The run's numbers for the page: the lines the terminal shows, then each part as data."""
    paths = ArtifactPaths(out)
    baseline = score.baseline
    return {
        "outcomes": score.coverage.outcomes().line(),
        "lines": score_lines(score, str(paths.failures), out=str(paths.out)),
        "coverage": {"all": score.coverage.as_dict(), **{g.agent: g.coverage.as_dict() for g in score.groups}},
        "groups": [
            {
                "name": g.agent,
                "source": g.source,
                "mean_reward": g.mean_reward,
                "note": g.note,
                "key_metrics": g.metrics.get("key_metrics") or {},
                "statistics": {
                    k: v for k, v in (g.metrics.get("statistics") or {}).items() if k != "baseline_comparison"
                },
                "usage": g.metrics.get("usage_summary") or {},
            }
            for g in score.groups
        ],
        "mean_reward": score.mean_reward,
        "metrics_file": None if score.metrics_path is None else str(score.metrics_path),
        "gates": {
            "exit_code": verdict.exit_code,
            "measures": list(verdict.measures),
            "problems": list(verdict.problems),
        },
        "baseline": baseline
        if baseline is None or isinstance(baseline, str)
        else {**baseline.as_dict(), "lines": baseline.lines()},
    }
