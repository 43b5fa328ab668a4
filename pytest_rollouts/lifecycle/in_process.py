"""A whole run in the caller's event loop, the Python API's door through the lifecycle: the datasets
read, routed and numbered, the agents cleared, the files prepared, every rollout dispatched by the
in-process driver (``dispatch/inprocess.py``) with each row written as it completes, then scored,
concluded and published as a pytest session's run is.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from array import array
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from pytest_rollouts.config.agents import Agents, AgentsError
from pytest_rollouts.config.collection import CollectionConfig
from pytest_rollouts.config.routing import RoutingError
from pytest_rollouts.dispatch.attempts import Attempts
from pytest_rollouts.dispatch.inprocess import PlanResult, dispatch_plan
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.export.tracing import RunTrace
from pytest_rollouts.lifecycle.refusal import Refusal
from pytest_rollouts.lifecycle.stages import Cleared, RunLifecycle
from pytest_rollouts.lifecycle.status import Counts, StatusWriter, concurrency_limit, ended_by
from pytest_rollouts.lifecycle.summary import RunSummary
from pytest_rollouts.plan.build import PlanError, RowShaping
from pytest_rollouts.plan.datasets import DatasetError, Task, read_datasets
from pytest_rollouts.plan.files import start_notices
from pytest_rollouts.plan.numbering import Numbering, number_run
from pytest_rollouts.rows.planned import Plan, PlannedRollout, PlannedRollouts
from pytest_rollouts.rows.records import RolloutOutcome
from pytest_rollouts.rows.shard import in_shard
from pytest_rollouts.scoring.gate import Gate
from pytest_rollouts.scoring.output_scan import OutputScan
from pytest_rollouts.scoring.perf import perf_summary
from pytest_rollouts.scoring.verdict import NO_TESTS_COLLECTED, OK, RunEnd
from pytest_rollouts.stops import in_thread
from pytest_rollouts.store.runlock import OutputBusy, RunLock

# How the Python API's user spells the options a notice names.
RESUME = "resume=True"
OVERWRITE = "overwrite=True"

Tell = Callable[[list[str]], None]


async def run_in_process(settings: CollectionConfig, tell: Tell) -> RunSummary:
    """Run ``settings`` to the end in the running event loop; ``tell``: the notices, as the door
    shows them. A ``Refusal`` before any request leaves the place as the run found it; a
    cancellation while the run is scored or published withdraws its conclusions."""
    root = Path.cwd()
    paths = settings.paths
    agents = Agents(settings, root)
    lock = RunLock(paths.lock, paths.out, option="out")
    life = RunLifecycle(paths, lock=lock)
    trace: RunTrace | None = None
    try:
        await asyncio.to_thread(_ask_head_server, agents)
        tasks, numbering, end, shaping = _read(agents.settings, agents, root, tell)
        settings = agents.settings  # with what the head server's config and the suites set for options not given
        if not numbering.resuming:  # before anything is moved aside: a refusal (or a stop) leaves no trace
            await life.clear(settings, agents, {task.agent for task in tasks})
        plan = _prepare(life, settings, root, tasks, numbering, shaping, tell)
        if numbering.resuming:
            await life.clear(settings, agents, plan.rollouts.agents())
        life.sent()  # what overwrite=True replaces goes as the first request does
        trace = RunTrace.start({"rollouts.out": str(paths.out), "rollouts.planned": len(plan.rollouts)})
        ended = _Ended(trace, plan.rollouts)
        limit = partial(concurrency_limit, settings)
        status = StatusWriter(paths.out, settings.status_interval, limit, ended.counts, ended.total).start()
        try:
            summary, stopped = await _dispatch_and_score(settings, life, plan, ended, end, agents, root, tell)
        except BaseException as exc:
            status.stop(ended_by(exc), ended.counts())
            raise
        status.stop(ended_by(None, dispatch_stopped=bool(stopped)), ended.counts())
        return summary
    except Refusal:
        lock.withdraw()  # before any request, and the files put back: the place as the run found it
        raise
    finally:
        agents.close()
        lock.release()
        if trace is not None:
            trace.end()


async def _dispatch_and_score(
    settings: CollectionConfig,
    life: RunLifecycle,
    plan: Plan,
    ended: _Ended,
    end: RunEnd,
    agents: Agents,
    root: Path,
    tell: Tell,
) -> tuple[RunSummary, str]:
    """Every rollout dispatched, then the run scored, concluded and published; and why dispatch
    stopped before the end of the plan, or ""."""
    paths, started = life.paths, time.perf_counter()
    assert life.cleared is not None
    dispatched = await _dispatch(settings, life, plan, ended)
    perf = perf_summary(ended.durations, time.perf_counter() - started) if ended.durations else None
    # Scored against the plan's own index of the materialized rows, as a pytest session is, not
    # one read back from disk; the planned rollouts, all sent, are let go first.
    outputs = OutputScan(paths.out, plan.expected)
    plan.rollouts.clear()
    try:
        score = await in_thread(
            life.score,
            settings,
            agent_url=partial(_metrics_url, agents),
            perf_summary=perf,
            outputs=outputs,
            drained=frozenset(dispatched.drained),
            trace=ended.trace,
            dispatch=dispatched.record.by_agent(),
        )
        verdict = life.conclude(score, replace(end, dispatch_failure=dispatched.stopped), Gate.of(settings))
        html = None if settings.html is None else root / settings.html
        published = await in_thread(life.publish, settings, score, verdict, html, agents.secrets)
    except asyncio.CancelledError:  # stopped while concluding: no metrics file, as the plugin leaves none
        life.withdraw_conclusions()
        raise
    tell(list(published.exports))
    summary = RunSummary(score, verdict, paths, settings.count_as_zero, published.report, published.exports)
    return summary, dispatched.stopped


def _ask_head_server(agents: Agents) -> None:
    """Read the head server's config (if the run names one) in a thread: its request runs an event
    loop of its own, which cannot start inside the caller's."""
    try:
        _ = agents.registry
    except AgentsError as exc:
        raise Refusal(str(exc), where="read") from None


def _read(
    settings: CollectionConfig, agents: Agents, root: Path, tell: Tell
) -> tuple[list[Task], Numbering, RunEnd, RowShaping]:
    """Read, route and number every task (this shard's only), before any file is touched; and what
    the run's end will say of a run with nothing to send (pytest's "no tests collected")."""
    try:
        read = read_datasets(settings.input, settings, agents, root)
        shown = partial(os.path.relpath, start=root)
        numbering = number_run(read.files, settings, agents, asked_resume=settings.resume, shown=shown)
    except (AgentsError, DatasetError, PlanError, RoutingError) as exc:
        raise Refusal(str(exc), where="read") from None
    tell([*read.notices, *filter(None, [numbering.unmatched]), *numbering.notices])
    tasks = []
    for task in read.tasks:
        task.task_index = numbering.first_task[task.dataset] + task.row_index
        if settings.shard is None or in_shard(task.task_index, settings.shard):
            task.slot = len(tasks)
            tasks.append(task)
    end = RunEnd(status=OK if tasks else NO_TESTS_COLLECTED, no_task_here=bool(read.tasks) and not tasks)
    return tasks, numbering, end, RowShaping.of(agents, read.prompts.get)


def _prepare(
    life: RunLifecycle,
    settings: CollectionConfig,
    root: Path,
    tasks: list[Task],
    numbering: Numbering,
    shaping: RowShaping,
    tell: Tell,
) -> Plan:
    """Take the output, then the lifecycle's preparation of the files and the plan."""
    paths, run_id = life.paths, uuid.uuid4().hex
    assert life.lock is not None
    try:
        killed = life.lock.acquire(run_id)
    except OutputBusy as exc:
        raise Refusal(str(exc), where="lock") from None
    except OSError as exc:  # a read-only or missing place: nothing was sent
        raise Refusal(f"cannot write the artifacts next to {paths.out}: {exc}", where="lock") from None
    if killed is not None:
        tell([f"{paths.out}: took it over from a run that was killed ({killed})"])
    shown = os.path.relpath(paths.materialized, root)
    plan = life.prepare(
        tasks,
        settings,
        numbering.manifest,
        run_id=run_id,
        resuming=numbering.resuming,
        shown=shown,
        shaping=shaping,
        recorded=numbering.recorded,
    )
    tell(start_notices(life.start, paths.out, resume=RESUME, overwrite=OVERWRITE))
    return plan


class _Ended:
    """What the run keeps of each rollout as it ends: its latency (8 bytes, for the perf summary),
    its failure class counted, and its tracing span, never the outcome itself (at a million
    rollouts, a gigabyte); and what the status file says while the run goes."""

    def __init__(self, trace: RunTrace | None, rollouts: PlannedRollouts) -> None:
        self.trace = trace
        self.durations = array("d")
        self._rollouts = rollouts
        self.total = len(rollouts)
        # Replaced whole at each failure: the status file's thread reads it while the loop counts.
        self._failed: dict[str, int] = {}
        # The requests in flight, by position in ``rollouts``, and each agent's adaptive limit now
        # (``dispatch_plan``'s ``watch``).
        self._in_flight: dict[int, float] = {}
        self._limits: Callable[[], dict[str, int]] = dict

    def __call__(self, rollout: PlannedRollout, outcome: RolloutOutcome) -> None:
        if outcome.attempts:
            self.durations.append(outcome.elapsed)
        status = outcome.status
        if status is not None:
            self._failed = {**self._failed, status: self._failed.get(status, 0) + 1}
        if self.trace is not None:
            self.trace.rollouts(rollout.task_index, rollout.agent, (outcome,))

    def watch(self, attempts: Attempts) -> None:
        self._in_flight = attempts.in_flight_since
        self._limits = attempts.live_limits

    def counts(self) -> Counts | None:
        """Now, from the status file's thread: None when the requests in flight changed while read
        (or the plan was let go as dispatch ended)."""
        since = self._in_flight
        where = None
        try:
            oldest = next(iter(since.items()), None)
            if oldest is not None:
                rollout = self._rollouts[oldest[0]]
                where = (time.monotonic() - oldest[1], rollout.task_index, rollout.rollout_index)
        except (RuntimeError, IndexError):
            return None
        return Counts(self.total, len(self.durations), self._failed, len(since), where, limits=self._limits())


async def _dispatch(settings: CollectionConfig, life: RunLifecycle, plan: Plan, ended: _Ended) -> PlanResult:
    """The in-process driver: every planned rollout, its row written as it completes (and handed to
    ``ended``); the agents were cleared already."""
    paths, cleared = life.paths, life.cleared
    assert cleared is not None
    if not plan.rollouts:
        # Nothing to send (a shard none of the tasks fell to, a resume with nothing left): its
        # artifacts still exist, as the merge and the next resume expect of every run.
        for path in (paths.out, paths.failures):
            path.touch()
        return PlanResult()
    header = PlanHeader.of(
        settings,
        _sent_to(cleared, plan),
        parallel=settings.parallel,
        limit=settings.resident_limit,
        paths=(str(paths.materialized), str(paths.out), str(paths.failures)),
        models=cleared.models,
        model_parallel=settings.model_parallel,
        result_types=cleared.result_types,
    )
    return await dispatch_plan(replace(header, health=None), plan.rollouts, ended, ended.watch)


def _sent_to(cleared: Cleared, plan: Plan) -> dict[str, str]:
    """The addresses of the agents the plan sends to (a fresh run cleared every task's)."""
    return {name: cleared.urls[name] for name in plan.rollouts.agents()}


def _metrics_url(agents: Agents, name: str) -> str | None:
    """Where a group's ``/aggregate_metrics`` lives; None (local metrics) for an agent not configured."""
    try:
        return None if agents.is_model(name) else agents.urls({name})[name]
    except AgentsError:
        return None
