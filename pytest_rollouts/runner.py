"""A whole run in process: ``run_from_config`` does for a script what the plugin does for a pytest
session, through the same core, so it leaves the same files and the same numbers.

The datasets are read and routed, the tasks numbered against the manifest (a resume checks
it), the output taken (one writer), earlier results moved aside (or repaired, resuming), the
materialized inputs written (or read back), every rollout dispatched in the caller's event loop
with each row written as it completes, and the run scored from disk against the whole
materialized set, its gates applied. ``run`` is the synchronous twin, for scripts.

Refusals (a bad config, a bad row, an output another run holds, unhealthy agents) raise
``CollectionRefused`` before any request is sent, and a fresh run refused so puts the earlier
results back. A failed rollout never raises: it is a row of the failures sidecar, and counted.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
import warnings
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from pytest_rollouts.config.agents import Agents, AgentsError
from pytest_rollouts.config.collection import CollectionConfig
from pytest_rollouts.config.routing import RoutingError
from pytest_rollouts.dispatch.inprocess import HealthCheckFailed, LocalDispatch, PlanResult, dispatch_plan
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.export.tracing import RunTrace
from pytest_rollouts.model.spec import ModelPlan
from pytest_rollouts.plan.build import PlanError, RowShaping, build_plan
from pytest_rollouts.plan.datasets import DatasetError, Task, read_datasets
from pytest_rollouts.plan.files import put_back, start_notices
from pytest_rollouts.plan.numbering import Numbering, number_run
from pytest_rollouts.report.build import report_at_end
from pytest_rollouts.rows.judge_retry import resume_mend
from pytest_rollouts.rows.plan import Plan, PlannedRollout
from pytest_rollouts.rows.records import RolloutOutcome
from pytest_rollouts.rows.shard import in_shard
from pytest_rollouts.scoring.aggregate import RunScore
from pytest_rollouts.scoring.configured import score_configured
from pytest_rollouts.scoring.gate import Gate
from pytest_rollouts.scoring.metrics import perf_summary
from pytest_rollouts.scoring.output_scan import OutputScan
from pytest_rollouts.scoring.summary import score_lines
from pytest_rollouts.scoring.verdict import INTERRUPTED, NO_TESTS_COLLECTED, OK, RunEnd, Verdict, judge_run
from pytest_rollouts.stops import TermAsInterrupt, in_thread
from pytest_rollouts.store.artifacts import ArtifactPaths, RunStart
from pytest_rollouts.store.jsonl import ArtifactError, JsonlError, loads
from pytest_rollouts.store.runlock import OutputBusy, RunLock

RESUME = "resume=True"
OVERWRITE = "overwrite=True"


class CollectionWarning(UserWarning):
    """What the caller of a run should know: where earlier results went, rows without request
    parameters, a routing key no row matched, an output lock taken over from a killed run."""


class CollectionRefused(ValueError):
    """The run was refused before any request was sent; the message says why."""


@dataclass(frozen=True)
class RunResult:
    """A finished run: its score from the files on disk, and the verdict of its gates."""

    score: RunScore
    verdict: Verdict
    paths: ArtifactPaths
    # The classes ``count_as_zero`` named: one neither known nor seen is named in ``summary``.
    count_as_zero: frozenset[str] = frozenset()
    # ``html``: where the report was written, or why it could not be (the run stands either way).
    report: str = ""

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The metrics file as written: each group's metrics (its server's ``/aggregate_metrics``, or
        computed locally) with its coverage. Empty when none was written (``no_aggregate``)."""
        path = self.score.metrics_path
        return loads(path.read_bytes()) if path is not None else []

    @property
    def mean_reward(self) -> float | None:
        return self.score.mean_reward

    @property
    def exit_status(self) -> int:
        """0, or the code the plugin would exit with (docs/scoring.md, "Exit codes")."""
        return self.verdict.exit_code

    def summary(self) -> str:
        """The run's score as the plugin's closing section words it: what became of the rollouts, the
        metrics and coverage, what the gates compared and why the run failed."""
        paths = self.paths
        lines = [
            self.score.coverage.outcomes().line(),
            *score_lines(
                self.score, str(paths.failures), "count_as_zero", out=str(paths.out), count_as_zero=self.count_as_zero
            ),
            *([self.verdict.stopped] if self.verdict.stopped else []),
            *self.verdict.measures,
            *self.verdict.problems,
            *([self.report] if self.report else []),
        ]
        return "\n".join(lines)


@dataclass
class _Prepared:
    plan: Plan
    start: RunStart
    resuming: bool


async def run_from_config(config: CollectionConfig | Mapping[str, Any]) -> RunResult:
    """Run ``config`` to the end in the running event loop; its score and the verdict of its gates.

    Cancelling it stops dispatch as Ctrl-C stops the plugin: what is in flight is cancelled, the
    rows written so far are kept, and a run with ``resume=True`` goes on from them.
    """
    settings = validated(config)
    assert settings.out is not None
    root = Path.cwd()
    paths = settings.paths
    agents = Agents(settings, root)
    lock = RunLock(paths.lock, paths.out, option="out")
    trace: RunTrace | None = None
    try:
        await asyncio.to_thread(_ask_head_server, agents)
        tasks, numbering, end, shaping = _read(agents.settings, agents, root)
        settings = agents.settings  # with what the head server's config and the suites set for options not given
        if not numbering.resuming:  # before anything is moved aside: a refusal leaves no trace
            await _check_health(settings, agents, _urls(agents, {task.agent for task in tasks}))
        prepared = _prepare(settings, paths, lock, root, tasks, numbering, shaping)
        agents_used = {r.agent for r in prepared.plan.rollouts}
        urls = _urls(agents, agents_used, paths, prepared)
        if numbering.resuming and agents_used:
            await _check_health(settings, agents, urls, paths, prepared)
        paths.discard(prepared.start)  # what --rollouts-overwrite replaces goes as the first request does
        started = time.perf_counter()
        trace = RunTrace.start({"rollouts.out": str(paths.out), "rollouts.planned": len(prepared.plan.rollouts)})
        ended = _Ended(trace)
        models = _models(agents, urls, paths, prepared)
        dispatched = await _dispatch(settings, urls, models, paths, prepared.plan, ended)
        perf = perf_summary(ended.durations, time.perf_counter() - started) if ended.durations else None
        # Scored against the plan's own index of the materialized rows, as a pytest session is, not
        # one read back from disk; the planned rollouts, all sent, are let go first.
        outputs = OutputScan(paths.out, prepared.plan.expected)
        prepared.plan.rollouts.clear()
        try:
            score = await in_thread(
                score_configured,
                paths,
                settings,
                agent_url=lambda name: _metrics_url(agents, name),
                perf_summary=perf,
                outputs=outputs,
                drained=frozenset(dispatched.drained),
            )
        except JsonlError as exc:
            raise CollectionRefused(f"cannot score the run: {exc}") from None
        except asyncio.CancelledError:  # stopped while scoring: no metrics file, as the plugin leaves none
            paths.metrics.unlink(missing_ok=True)
            raise
        if trace is not None:
            trace.scored(score)
        end = replace(end, dispatch_failure=dispatched.stopped)
        verdict = judge_run(score, end, Gate.of(settings))
        html = None if settings.html is None else root / settings.html
        report = "" if html is None else await in_thread(report_at_end, html, paths.out, score, verdict)
        if settings.wandb or settings.mlflow:  # while the output is still this run's; after the report it logs
            from pytest_rollouts.export.exports import export_run

            exports = {"wandb": settings.wandb, "mlflow": settings.mlflow}
            secrets = agents.secrets()
            _tell(await in_thread(export_run, exports, score, paths.out, html, secrets=secrets))
        return RunResult(score, verdict, paths, settings.count_as_zero, report)
    except CollectionRefused:
        lock.withdraw()  # before any request, and the files put back: the place as the run found it
        raise
    finally:
        agents.close()
        lock.release()
        if trace is not None:
            trace.end()


class RunInterrupted(SystemExit, KeyboardInterrupt):
    """``run`` stopped by Ctrl-C or SIGTERM, once the rows written so far were kept and the output
    let go. A ``KeyboardInterrupt``, so a script that catches one catches this too; and a
    ``SystemExit`` with the plugin's status for a stopped run (2), so a script that does not
    catch it ends with that status after ``run``'s one line, as the plugin does, not a traceback."""


def run(config: CollectionConfig | Mapping[str, Any]) -> RunResult:
    """``run_from_config`` on an event loop of its own, for scripts. Ctrl-C or SIGTERM stops it as
    cancelling stops ``run_from_config`` (what was written is kept, a resume goes on), says so in
    a line on stderr and raises ``RunInterrupted``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run() starts an event loop of its own; in async code, await run_from_config(config)")
    settings = validated(config)
    term = TermAsInterrupt()
    try:
        return asyncio.run(_stoppable(settings, term))
    except (KeyboardInterrupt, asyncio.CancelledError):  # asyncio.run's Ctrl-C; our SIGTERM's cancellation
        stop = "SIGTERM" if term.received else "SIGINT"
        rows = any(path.is_file() and path.stat().st_size for path in (settings.paths.out, settings.paths.failures))
        kept = f"the rows written so far are kept in {settings.out}; resume=True goes on from them"
        print(
            f"interrupted by {stop}: {kept if rows else 'before any row was written, so none is kept'}", file=sys.stderr
        )
        raise RunInterrupted(INTERRUPTED) from None


async def _stoppable(settings: CollectionConfig, term: TermAsInterrupt) -> RunResult:
    """The run, SIGTERM cancelling it as Ctrl-C does: ``run`` owns this loop and its signals."""
    task = asyncio.current_task()
    assert task is not None
    with term.taken(task):
        return await run_from_config(settings)


def validated(config: CollectionConfig | Mapping[str, Any]) -> CollectionConfig:
    """``config`` checked as the plugin checks its options; ``ValueError`` says what is wrong."""
    if isinstance(config, CollectionConfig):
        return config
    if not isinstance(config, Mapping):
        raise ValueError(
            f"a run's config is a CollectionConfig or a mapping of its fields, not {type(config).__name__}"
        )
    return CollectionConfig(**{str(key): value for key, value in config.items()})


def _ask_head_server(agents: Agents) -> None:
    """Read the head server's config (if the run names one) in a thread: its request runs an event
    loop of its own, which cannot start inside the caller's."""
    try:
        _ = agents.registry
    except AgentsError as exc:
        raise CollectionRefused(str(exc)) from None


def _read(settings: CollectionConfig, agents: Agents, root: Path) -> tuple[list[Task], Numbering, RunEnd, RowShaping]:
    """Read, route and number every task (this shard's only), before any file is touched; and what
    the run's end will say of a run with nothing to send (pytest's "no tests collected")."""
    try:
        read = read_datasets(settings.input, settings, agents, root)
        shown = partial(os.path.relpath, start=root)
        numbering = number_run(read.files, settings, agents, asked_resume=settings.resume, shown=shown)
    except (AgentsError, DatasetError, PlanError, RoutingError) as exc:
        raise CollectionRefused(str(exc)) from None
    _tell([*read.notices, *filter(None, [numbering.unmatched]), *numbering.notices])
    tasks = []
    for task in read.tasks:
        task.task_index = numbering.first_task[task.dataset] + task.row_index
        if settings.shard is None or in_shard(task.task_index, settings.shard):
            task.slot = len(tasks)
            tasks.append(task)
    end = RunEnd(status=OK if tasks else NO_TESTS_COLLECTED, no_task_here=bool(read.tasks) and not tasks)
    return tasks, numbering, end, RowShaping.of(agents, read.prompts.get)


def _prepare(
    settings: CollectionConfig,
    paths: ArtifactPaths,
    lock: RunLock,
    root: Path,
    tasks: list[Task],
    numbering: Numbering,
    shaping: RowShaping,
) -> _Prepared:
    """Take the output, move earlier results aside (or repair them, resuming), write or read the plan."""
    run_id = uuid.uuid4().hex
    try:
        killed = lock.acquire(run_id)
        start = paths.start_run(
            run_id,
            resume=numbering.resuming,
            overwrite=settings.overwrite,
            mend=resume_mend(paths, settings.retry_invalid_judge_responses),
        )
    except OutputBusy as exc:
        raise CollectionRefused(str(exc)) from None
    except OSError as exc:  # a read-only or missing place: nothing was sent
        raise CollectionRefused(f"cannot write the artifacts next to {paths.out}: {exc}") from None
    if killed is not None:
        _tell([f"{paths.out}: took it over from a run that was killed ({killed})"])
    _tell(start_notices(start, paths.out, resume=RESUME, overwrite=OVERWRITE))
    resuming, shown = numbering.resuming, os.path.relpath(paths.materialized, root)
    try:
        plan = build_plan(tasks, paths, settings, numbering.manifest, resuming=resuming, shown=shown, shaping=shaping)
    except PlanError as exc:
        raise CollectionRefused(f"{exc}{put_back(paths, start, resuming=resuming)}") from None
    except ArtifactError as exc:  # a full disk before anything was sent
        raise CollectionRefused(f"{exc}{put_back(paths, start, resuming=resuming)}") from None
    return _Prepared(plan, start, resuming)


def _urls(
    agents: Agents, names: set[str], paths: ArtifactPaths | None = None, prepared: _Prepared | None = None
) -> dict[str, str]:
    """The addresses of ``names``, starting embedded agents; a refusal after the files were
    prepared (``prepared``) puts earlier results back."""
    try:
        return agents.urls(names)
    except AgentsError as exc:
        undo = "" if prepared is None or paths is None else put_back(paths, prepared.start, resuming=prepared.resuming)
        raise CollectionRefused(f"{exc}{undo}") from None


def _models(agents: Agents, names: Iterable[str], paths: ArtifactPaths, prepared: _Prepared) -> dict[str, ModelPlan]:
    """The model agents among ``names``, for dispatch to run; a refusal puts earlier results back."""
    try:
        return agents.models(names)
    except AgentsError as exc:
        raise CollectionRefused(f"{exc}{put_back(paths, prepared.start, resuming=prepared.resuming)}") from None


async def _check_health(
    settings: CollectionConfig,
    agents: Agents,
    urls: dict[str, str],
    paths: ArtifactPaths | None = None,
    prepared: _Prepared | None = None,
) -> None:
    """The agents' health checks, as the plugin runs them before its first request: a model
    agent's address is its model's, which has no ``/health`` to ask. A refusal after the files
    were prepared (``prepared``) puts them back."""
    urls = {name: url for name, url in urls.items() if not agents.is_model(name)}
    if settings.no_health_check or not urls:
        return
    header = PlanHeader.of(settings, urls, parallel=settings.parallel, limit=1)
    try:
        async with LocalDispatch(header) as dispatch:
            await dispatch.check_health()
    except HealthCheckFailed as exc:
        undo = "" if prepared is None or paths is None else put_back(paths, prepared.start, resuming=prepared.resuming)
        raise CollectionRefused(f"{exc}{undo}") from None


class _Ended:
    """What the run keeps of each rollout as it ends: its latency (8 bytes, for the perf summary)
    and its tracing span, never the outcome itself (at a million rollouts, a gigabyte)."""

    def __init__(self, trace: RunTrace | None) -> None:
        self._trace = trace
        self.durations = array("d")

    def __call__(self, rollout: PlannedRollout, outcome: RolloutOutcome) -> None:
        if outcome.attempts:
            self.durations.append(outcome.elapsed)
        if self._trace is not None:
            self._trace.rollouts(rollout.task_index, rollout.agent, (outcome,))


async def _dispatch(
    settings: CollectionConfig,
    urls: dict[str, str],
    models: dict[str, ModelPlan],
    paths: ArtifactPaths,
    plan: Plan,
    ended: _Ended,
) -> PlanResult:
    """Every planned rollout, its row written as it completes (and handed to ``ended``); the agents
    were checked already."""
    if not plan.rollouts:
        # Nothing to send (a shard none of the tasks fell to, a resume with nothing left): its
        # artifacts still exist, as the merge and the next resume expect of every run.
        for path in (paths.out, paths.failures):
            path.touch()
        return PlanResult()
    header = PlanHeader.of(
        settings,
        urls,
        parallel=settings.parallel,
        limit=settings.resident_limit,
        paths=(str(paths.materialized), str(paths.out), str(paths.failures)),
        models=models,
        model_parallel=settings.model_parallel,
    )
    return await dispatch_plan(replace(header, health=None), plan.rollouts, ended)


def _metrics_url(agents: Agents, name: str) -> str | None:
    """Where a group's ``/aggregate_metrics`` lives; None (local metrics) for an agent not configured."""
    try:
        return None if agents.is_model(name) else agents.urls({name})[name]
    except AgentsError:
        return None


def _tell(notices: list[str]) -> None:
    """Each notice as a warning from the caller's line: the first frame neither ours nor asyncio's
    (a fixed stack level lands in asyncio's event loop when ``run`` drives the coroutine)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").partition(".")[0] in INTERNAL:
        frame = frame.f_back
    for notice in notices:
        warnings.warn_explicit(
            CollectionWarning(notice),
            CollectionWarning,
            frame.f_code.co_filename,
            frame.f_lineno,
            frame.f_globals.get("__name__"),
        )


# The packages between a caller and a notice.
INTERNAL = frozenset({"pytest_rollouts", "asyncio"})
