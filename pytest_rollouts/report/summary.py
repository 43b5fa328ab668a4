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

from pytest_rollouts.rows.records import NO_REWARD, metrics_group
from pytest_rollouts.rows.schema import ENVIRONMENT_SERVER
from pytest_rollouts.scoring.accounting import Coverage, ScoringPolicy
from pytest_rollouts.scoring.aggregate import GroupScore, RunScore, score_run
from pytest_rollouts.scoring.compare_runs import RunComparison, compare_runs
from pytest_rollouts.scoring.gate import Gate
from pytest_rollouts.scoring.metrics_shape import COVERAGE, odd_coverage, without_odd_values
from pytest_rollouts.scoring.multiplicity import NONE
from pytest_rollouts.scoring.pairing import PairingError
from pytest_rollouts.scoring.summary import score_lines
from pytest_rollouts.scoring.verdict import RunEnd, Verdict, judge_run
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import JsonlError, loads

# Metrics entries' keys the report leaves out: per-task entries (the table has the rollouts) and
# what it shows from elsewhere.
LEFT_OUT = frozenset(
    {"agent_ref", ENVIRONMENT_SERVER, "group_level_metrics", "coverage", "metrics_source", "metrics_note"}
)


def score_from_files(
    out: Path, gate: Gate, baseline: Path | None = None, correction: str = NONE, sequential_test: bool = False
) -> tuple[RunScore, Verdict]:
    """The run's score as its end had it: each group's coverage and metrics from its metrics file
    (the scoring policies it ran with included); else the coverage scored from the rows under the
    default policy, with the metrics of a file that records no coverage (NeMo Gym's) where it has
    them; the comparison with ``baseline``; the verdict of ``gate``."""
    paths = ArtifactPaths(out)
    entries = _metrics_entries(paths)
    score = _from_metrics_file(paths, entries) if entries else None
    if score is None:  # --rollouts-no-aggregate, a run stopped before its metrics, or NeMo Gym's run
        score = score_run(paths, ScoringPolicy(), agent_url=lambda name: None, write_metrics=False, timeout=1.0)
        _take_metrics(score, entries, paths)
    if baseline is not None:
        score.baseline = comparison(baseline, out, correction, sequential_test)
    return score, judge_run(score, RunEnd(), gate)


def _metrics_entries(paths: ArtifactPaths) -> list[dict[str, Any]]:
    """The metrics file's entries (none without the file)."""
    if not paths.metrics.is_file():
        return []
    try:  # the one decoder the run wrote it for: a NaN a server sent, or an infinite mean, is read back
        entries = loads(paths.metrics.read_bytes())
    except ValueError as exc:
        raise JsonlError(f"{paths.metrics}: not valid JSON ({exc})") from None
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []


def _from_metrics_file(paths: ArtifactPaths, entries: list[dict[str, Any]]) -> RunScore | None:
    """The score the run wrote: each group's metrics and coverage; None when an entry has no coverage."""
    groups, total = [], Coverage()
    for entry in entries:
        coverage = _coverage(entry.get("coverage"))
        if coverage is None:
            return None
        group = GroupScore(metrics_group(entry), coverage, source=str(entry.get("metrics_source", "file")))
        _file_metrics(group, entry, str(entry.get("metrics_note", "")))
        groups.append(group)
        total += coverage
    return RunScore(groups, total, metrics_path=paths.metrics)


def _take_metrics(score: RunScore, entries: list[dict[str, Any]], paths: ArtifactPaths) -> None:
    """A metrics file without coverage (NeMo Gym's collector writes none) still holds each group's
    metrics: the groups scored from the rows take them, by the group each entry names."""
    by_group = {metrics_group(entry): entry for entry in entries}
    for group in score.groups:
        entry = by_group.get(group.agent)
        if entry is not None:
            group.source = "file"
            _file_metrics(group, entry, "")
            score.metrics_path = paths.metrics


def _file_metrics(group: GroupScore, entry: dict[str, Any], note: str) -> None:
    """An entry's metrics as the group's, sections of odd values left out and named in its note."""
    group.metrics, odd = without_odd_values({k: v for k, v in entry.items() if k not in LEFT_OUT or k == COVERAGE})
    group.metrics.pop(COVERAGE, None)  # the group's own, read by ``_coverage``
    if odd:
        note = "; ".join([*filter(None, [note]), f"left out of the metrics file: {'; '.join(odd)}"])
    group.note = note


def comparison(baseline: Path, out: Path, correction: str = NONE, sequential_test: bool = False) -> RunComparison | str:
    """The run against ``baseline`` as ``--rollouts-baseline`` compares them (tasks only one run has
    left out), or why they cannot be compared."""
    try:
        return compare_runs(baseline, out, allow_partial=True, correction=correction, sequential_test=sequential_test)
    except (PairingError, JsonlError) as exc:
        return f"cannot compare with {baseline}: {exc}"


def _coverage(entry: Any) -> Coverage | None:
    """A metrics entry's ``coverage`` back as scoring's ``Coverage`` (``failed_by_class`` there
    adds the results without a reward, which ``Coverage`` keeps apart); None without one that fits."""
    if not isinstance(entry, dict) or odd_coverage(entry):  # rescored from the rows, the odd named
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
