"""Score a run from its artifacts on disk: coverage, scoring policies, metrics, the metrics file.

The files are the source of truth (an xdist worker that crashed never reports, but its
rows are on disk). Rows are streamed: only a few numbers per rollout stay in memory. A group's
metrics come from its server (``server_metrics.py``), else are computed here (``metrics.py``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.key_index import KeyIndex
from pytest_rollouts.rows.manifest import read_manifest
from pytest_rollouts.rows.metric_body import metric_input
from pytest_rollouts.rows.records import reward_of
from pytest_rollouts.rows.resume import key_of
from pytest_rollouts.rows.schema import ENVIRONMENT_SERVER, FAILURE_CLASS, ROLLOUT_INDEX, TASK_INDEX
from pytest_rollouts.scoring.accounting import Accounting, Coverage, Key, ScoringPolicy, account
from pytest_rollouts.scoring.masking import MASKING, masking_metrics
from pytest_rollouts.scoring.metrics import compute_default_metrics
from pytest_rollouts.scoring.metrics_file import group_label, write_metrics_file
from pytest_rollouts.scoring.output_scan import GroupRows, OutputScan
from pytest_rollouts.scoring.perf import token_rates
from pytest_rollouts.scoring.run_statistics import (
    DEFAULT_STATISTICS,
    STATISTICS,
    StatisticsOptions,
    TaskLabels,
    group_statistics,
    task_labels,
)
from pytest_rollouts.scoring.server_metrics import MetricsPost, MetricsServerError, server_metrics
from pytest_rollouts.scoring.usage import usage_summary
from pytest_rollouts.store.artifacts import ArtifactPaths, artifact_rows
from pytest_rollouts.store.jsonl import ArtifactError, JsonlError, LineReader, parse_object

if TYPE_CHECKING:
    from pytest_rollouts.scoring.compare_runs import RunComparison

# What an imputed zero has of its own: which rollout it is, and the agent or server it was routed to.
IDENTITY = (TASK_INDEX, ROLLOUT_INDEX, "agent_ref", ENVIRONMENT_SERVER)


@datatype
class GroupScore:
    """One agent group's score: its coverage and its metrics, from its server or computed here."""

    agent: str
    coverage: Coverage
    metrics: dict[str, Any] = field(default_factory=dict)
    source: str = "none"
    note: str = ""
    # Its metrics entry's names (``metrics_file.group_label``); empty: its agent alone.
    label: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_reward(self) -> float | None:
        """``key_metrics`` ``mean/reward``, else ``agent_metrics``' (a server may fill only one).

        A NaN or an infinity there (a server's metrics are kept as it sent them) is no score: NaN
        would pass any ``--rollouts-fail-under`` (no comparison with it is true), and so would an
        infinite mean."""
        for part in ("key_metrics", "agent_metrics"):
            section = self.metrics.get(part)
            value = section.get("mean/reward") if isinstance(section, dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                return float(value)
        return None


@datatype
class RunScore:
    """The whole run's score: each group's, the coverage of all of them, and where the metrics went."""

    groups: list[GroupScore]
    coverage: Coverage
    metrics_path: Path | None = None
    # Why the metrics file could not be written (a full disk at the very end), or "".
    metrics_error: str = ""
    # The comparison with --rollouts-baseline, why it could not be made, or None without one.
    baseline: RunComparison | str | None = None

    @property
    def mean_reward(self) -> float | None:
        """The run's key number: each group's ``mean/reward``, weighted by the rollouts it covers."""
        pairs = [(g.mean_reward, g.coverage.scored) for g in self.groups if g.mean_reward is not None]
        weight = sum(n for _, n in pairs)
        return sum(m * n for m, n in pairs) / weight if weight else None


def score_run(
    paths: ArtifactPaths,
    policy: ScoringPolicy,
    *,
    agent_url: Callable[[str], str | None],
    agent_headers: Callable[[str], Mapping[str, str]] = lambda name: {},
    write_metrics: bool,
    timeout: float,
    perf_summary: dict[str, Any] | None = None,
    outputs: OutputScan | None = None,
    drained: frozenset[Key] = frozenset(),
    dispatch: Mapping[str, Mapping[str, Any]] | None = None,
    statistics: StatisticsOptions = DEFAULT_STATISTICS,
    baseline: RunComparison | str | None = None,
    post: MetricsPost | None = None,
) -> RunScore:
    """``perf_summary`` is this session's latency and throughput, added to groups whose server gave none.

    ``outputs``: the dispatching session's scan of the output file, already part-read
    while it waited on the dispatcher; otherwise both files are read from the start.
    ``drained``: the keys this session's dispatch budget did not start (see ``account``).
    ``statistics``: the reward range, pass@k's k and the grouping field of each group's ``statistics``.
    ``baseline``: the comparison with ``--rollouts-baseline``, written into each group's ``statistics``.
    ``dispatch``: by group, how its dispatch went (adaptive limits, retries), written as its ``dispatch``.
    ``post``: who sends a group's ``/aggregate_metrics`` (a pytest session: its dispatcher process).
    """
    scan = outputs.current() if outputs is not None else OutputScan.of_files(paths)
    scan.advance()
    latest = _latest_failures(paths.failures)
    scores = []
    total = Coverage()
    samples = _Samples(paths.materialized)
    # The manifest, read once: the tasks' datasets for the statistics, the split for the metrics file.
    recorded = read_manifest(paths.manifest) if write_metrics else None
    labels = task_labels(paths.materialized, recorded, statistics.group_by) if write_metrics else None
    metrics = _GroupMetrics(paths, agent_url, agent_headers, timeout, post, samples, statistics, labels, latest)
    failed = {k: c for k, (c, _) in latest.items()}
    for name, group in sorted(scan.groups.items()):
        accounting = account(group.states(), failed, policy, drained)
        total += accounting.coverage
        score = GroupScore(name, accounting.coverage)
        scores.append(score)
        if write_metrics:
            metrics.fill(score, group, accounting, baseline, perf_summary)
            if dispatch and name in dispatch:
                score.metrics["dispatch"] = dispatch[name]
    result = RunScore(scores, total, baseline=baseline)
    if write_metrics:
        try:
            result.metrics_path = write_metrics_file(paths.metrics, scores, recorded.split if recorded else None)
        except ArtifactError as exc:  # the score is known: report it, and that it is not on disk
            result.metrics_error = str(exc)
        finally:
            samples.close()
    return result


@datatype
class _GroupMetrics:
    """A scored group's metrics entry: its server's ``/aggregate_metrics`` (else computed locally),
    its statistics and comparison with the baseline, usage, masking and timing."""

    paths: ArtifactPaths
    agent_url: Callable[[str], str | None]
    agent_headers: Callable[[str], Mapping[str, str]]
    timeout: float
    post: MetricsPost | None
    samples: _Samples
    statistics: StatisticsOptions
    labels: TaskLabels | None
    latest: dict[Key, tuple[str, int]]

    def fill(
        self,
        score: GroupScore,
        group: GroupRows,
        accounting: Accounting,
        baseline: RunComparison | str | None,
        perf_summary: dict[str, Any] | None,
    ) -> None:
        name = score.agent
        score.label = self.samples.label(name, group.expected)
        added = _added_rows(self.paths, group, accounting.counted, accounting.imputed, self.latest)
        rollouts = group.rollouts(added)
        url = self.agent_url(name)
        if url is not None:
            try:
                order, in_order = group.metric_order(added)
                headers = self.agent_headers(name)
                server = server_metrics(url, headers, self.paths.out, order, in_order, self.timeout, self.post)
            except MetricsServerError as exc:
                server, score.note = None, f"{exc}; computed locally instead"
            if server is not None:
                score.metrics, score.source = server, "server"
        per_task = Counter(group.expected.tasks)
        # Each task's rewards, for the local metrics and the statistics (the interval and Manski's
        # bounds, over the same metric input) alike: one pass, one copy, let go once both are made
        # (at a million tasks they are an array each).
        rewards = rollouts.field_by_task("reward")
        if score.source != "server":
            sample = self.samples.of(group.expected)
            metrics = compute_default_metrics(
                rollouts, expected=per_task, sample=sample, pass_ks=self.statistics.pass_ks, rewards_by_task=rewards
            )
            score.metrics, score.source = metrics, "local"
        unknown = group.unknown_by_task(rewards, per_task)
        score.metrics[STATISTICS] = group_statistics(rewards, unknown, self.statistics, self.labels)
        del rewards, unknown
        if not isinstance(baseline, str) and baseline is not None:
            score.metrics[STATISTICS]["baseline_comparison"] = baseline.group_entry(name)
        real = group.rollouts() if added else rollouts
        usage = usage_summary(real)
        if usage is not None and score.metrics.get("usage_summary") is None:
            score.metrics["usage_summary"] = usage
        if masking := masking_metrics(name, accounting.coverage, real):
            score.metrics.setdefault(MASKING, masking)
        if perf_summary is not None and not score.metrics.get("perf_summary"):
            score.metrics["perf_summary"] = {**perf_summary, **token_rates(usage, perf_summary)}


class _Samples:
    """Each task's ``sample`` in ``group_level_metrics``, read from the materialized file as its entry is written.

    NeMo Gym's is the task's materialized row without its two indices. Memory holds where each
    task's row sits, never the rows: at 100k tasks their prompts would be the dataset again. The
    file stays open from one task to the next (opening it for each costs seconds at 100k) until
    ``close``; a read after that opens it again.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._handle: BinaryIO | None = None

    def of(self, expected: KeyIndex) -> Callable[[int], dict[str, Any] | None]:
        """A group's samples: a task's row is that of its lowest rollout index in the group.

        NeMo Gym takes the first rollout with a result; the rows of one task's rollouts differ
        only in their index (and seed), so the first one materialized stands for the task, and a
        task without any result has a sample too.
        """
        lowest, rollouts, offsets = expected.lowest_positions(), expected.rollouts, expected.offsets

        def sample(task: int) -> dict[str, Any] | None:
            at = lowest.get(task)
            return None if at is None else self._read(offsets[at], (task, rollouts[at]))

        return sample

    def label(self, group: str, expected: Mapping[Key, int]) -> dict[str, Any]:
        """The group's metrics entry names, read off one of its materialized rows."""
        key = next(iter(expected), None)
        return group_label(group, self._read(expected[key], key)) if key is not None else {}

    def _read(self, offset: int, key: Key) -> dict[str, Any]:
        """The materialized row of ``key``, where the run wrote it; ``JsonlError`` when another row
        is there (the file was changed after the run wrote it, and the score cannot be trusted)."""
        if self._handle is None:
            self._handle = open(self._path, "rb")
        self._handle.seek(offset)
        row = parse_object(self._handle.readline(), self._path, 0)
        if (row.pop(TASK_INDEX, None), row.pop(ROLLOUT_INDEX, None)) != key:
            raise JsonlError(f"{self._path}: changed after the run wrote it (no rollout {key} at byte {offset})")
        return row

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _latest_failures(failures: Path) -> dict[Key, tuple[str, int]]:
    """The last attempt recorded for each key: its class and where its row sits."""
    latest: dict[Key, tuple[str, int]] = {}
    for _, offset, _, row in artifact_rows(failures):
        latest[key_of(row)] = (str(row.get(FAILURE_CLASS)), offset)
    return latest


def _added_rows(
    paths: ArtifactPaths,
    group: GroupRows,
    counted: list[Key],
    imputed: list[Key],
    latest: Mapping[Key, tuple[str, int]],
) -> list[dict[str, Any]]:
    """The zeros the policies add: a counted failure is its latest sidecar row, an imputed zero
    only its rollout's identity (``IDENTITY``); both get their task's dataset fields (``_as_zero``).
    """
    added = []
    materialized = paths.materialized  # a property that reads the manifest: once, not once a row
    with LineReader() as reader:
        for key in counted:
            row = parse_object(reader.read(paths.failures, latest[key][1]), paths.failures, 0)
            added.append(_as_zero(row, _task_row(reader, materialized, group.expected[key]), group.fields))
        for key in imputed:
            task_row = _task_row(reader, materialized, group.expected[key])
            identity = {k: task_row[k] for k in IDENTITY if k in task_row}
            added.append(_as_zero(identity, task_row, group.fields))
    return added


def _task_row(reader: LineReader, materialized: Path, offset: int) -> dict[str, Any]:
    return parse_object(reader.read(materialized, offset), materialized, 0)


def _as_zero(row: dict[str, Any], task_row: Mapping[str, Any], carried: set[str]) -> dict[str, Any]:
    """``row`` scored (the reward it carries, else 0.0), with those of its task's dataset fields that
    real rows of its group carry.

    NeMo Gym's ``_failure_rows_counted_as_zero``: a failure row that carries a reward counts as it
    stands; one without says no rollout happened, so it counts as a zero, here and only here.

    NeMo Gym's ``_fill_task_fields``: rows are ordered by repeat, so an added row can be its
    task's first, and metric hooks read task-level fields (a subset label, a weight) from there.
    But the aggregator averages every number it is handed: a dataset field no real row reports
    (one the agent does not echo) would become a metric of its own, computed from zeros alone.
    """
    own = reward_of(row)  # a failure an agent classified may carry its verifier's reward: it stands
    row.update({k: v for k, v in task_row.items() if k in carried and k not in row})
    row["reward"] = 0.0 if own is None else own  # never the dataset row's field of that name
    return metric_input(row)
