"""``RunLifecycle``: the stages every door takes a run through, in one order, each written once.

prepare (what refuses a run without sending anything, then the files: earlier results moved
aside or repaired, the plan written or read back) -> dispatch (the door's driver: the dispatcher
process, or the caller's event loop) -> score -> conclude (the verdict) -> publish (the report,
the exports). A refusal before any request puts the files back as they were found; a stop while
the run is scored or published withdraws what it concluded (the metrics file, the report it
began), which would otherwise contradict the rows a resume goes on from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rollouts.config.agents import Agents, AgentsError
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.datatype import datatype
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.lifecycle.refusal import INTERRUPTED, USAGE, Refusal
from pytest_rollouts.plan.build import PlanError, PlannedTask, RowShaping, build_plan
from pytest_rollouts.plan.files import put_back
from pytest_rollouts.rows.planned import Key, Plan
from pytest_rollouts.scoring.verdict import Verdict, judge_run
from pytest_rollouts.store.artifacts import ArtifactPaths, RunStart
from pytest_rollouts.store.jsonl import ArtifactError, JsonlError
from pytest_rollouts.store.runlock import RunLock

if TYPE_CHECKING:
    from pytest_rollouts.export.tracing import RunTrace
    from pytest_rollouts.model.spec import ModelPlan
    from pytest_rollouts.net.auth import Redactor
    from pytest_rollouts.rows.manifest import RunManifest
    from pytest_rollouts.scoring.aggregate import RunScore
    from pytest_rollouts.scoring.output_scan import OutputScan
    from pytest_rollouts.scoring.server_metrics import MetricsPost


@datatype
class Cleared:
    """The agents a plan sends to, cleared before anything is moved: where each answers (embedded
    ones started), the model agents the driver runs, and the environment servers' types."""

    urls: dict[str, str]
    models: dict[str, ModelPlan]
    # Each environment server's type among ``urls`` (``Agents.result_types``), for the rows it runs.
    result_types: dict[str, str] = field(default_factory=dict)


class PublishStopped(KeyboardInterrupt):
    """A stop cut publishing short and the run's conclusions were withdrawn: the message says
    where it came; ``lines``: what the exports done before it said."""

    def __init__(self, message: str, lines: list[str]) -> None:
        super().__init__(message)
        self.lines = lines


@datatype
class Published:
    """What publishing a scored run said: where the report went (or why not), a line per export."""

    report: str = ""
    exports: tuple[str, ...] = ()


class RunLifecycle:
    """One run's files from their preparation to its publication.

    ``lock``: the hold on the output that a refusal withdraws (the door takes it, its own way);
    ``owner``: this process prepares the files for the whole run. An xdist worker is not: others
    may be writing the same files, and its controller decides for all."""

    def __init__(self, paths: ArtifactPaths, *, lock: RunLock | None = None, owner: bool = True) -> None:
        self.paths = paths
        self.lock = lock
        self.owner = owner
        # Where the earlier results went, and what a crash had cut: what a refusal puts back.
        self.start = RunStart()
        self.resuming = False
        # The files were prepared by this process (earlier results moved aside, the plan written).
        self.prepared = False
        # The report this run began writing, which a stop withdraws.
        self._reporting: Path | None = None
        # The agents, once cleared (``clear``): a fresh run moves nothing before.
        self.cleared: Cleared | None = None
        # Clearing the agents began (a stop may cut it short: nothing was moved then).
        self._clearing = False

    # -- clear: every refusal that sends nothing and moves nothing -------------------------

    async def clear(
        self, settings: Settings, agents: Agents, names: set[str], recorded: Callable[[], Any] = tuple
    ) -> Cleared:
        """The addresses of ``names`` (embedded agents started), their model agents, and their
        health (``/health`` on every agent not a model), or a ``Refusal``: for a fresh run, before
        any file is moved; for a resume, once the plan says which agents it still sends to.
        ``recorded``: the dataset paths of the run resumed, for a process that collected none.

        The checks run here, on the caller's loop: a door that dispatches in its own process
        has the HTTP client loaded anyway (``clear_blocking`` is for one that has not)."""
        cleared, checked = self._addresses(agents, names, recorded)
        header = _health_header(settings, checked)
        if header is None:
            return self._cleared(cleared, [])
        from pytest_rollouts.dispatch.agents import PlanAgents

        return self._cleared(cleared, await PlanAgents.of(header).unhealthy_lines())

    def clear_blocking(
        self,
        settings: Settings,
        agents: Agents,
        names: set[str],
        recorded: Callable[[], Any] = tuple,
        *,
        ask: Callable[[PlanHeader], list[str]],
    ) -> Cleared:
        """``clear`` from synchronous code (a pytest session): ``ask`` checks the health of a plan
        header's agents elsewhere (the session's dispatcher process, ``dispatch/process.py``), so
        this process loads no event loop nor HTTP client for it. One line per unhealthy agent."""
        cleared, checked = self._addresses(agents, names, recorded)
        header = _health_header(settings, checked)
        return self._cleared(cleared, [] if header is None else ask(header))

    def _addresses(
        self, agents: Agents, names: set[str], recorded: Callable[[], Any]
    ) -> tuple[Cleared, dict[str, str]]:
        """Where each agent answers, its model agents and server types, and the agents whose health to check."""
        self._clearing = True
        try:
            urls = agents.urls(names, recorded)
            models = agents.models(urls)
        except AgentsError as exc:
            raise self.refuse(str(exc), where="agents") from None
        checked = {name: url for name, url in urls.items() if not agents.is_model(name, recorded)}
        return Cleared(urls, models, agents.result_types(urls)), checked

    def _cleared(self, cleared: Cleared, unhealthy: list[str]) -> Cleared:
        if unhealthy:
            why = "agents failed their health check; nothing was sent"
            raise self.refuse(why, exit_status=INTERRUPTED, where="health", lines=unhealthy)
        self.cleared = cleared
        return cleared

    # -- prepare ---------------------------------------------------------------------------

    def prepare(
        self,
        tasks: Sequence[PlannedTask],
        settings: Settings,
        manifest: RunManifest,
        *,
        run_id: str,
        resuming: bool,
        shown: str,
        shaping: RowShaping,
        told: Callable[[RunStart], None] | None = None,
        recorded: RunManifest | None = None,
    ) -> Plan:
        """Move earlier results aside (or repair them, resuming) and write or read back the plan.
        A fresh run's agents were cleared first (``clear``): no refusal that sends nothing comes
        after anything is moved. ``shown``: the materialized inputs as the user reads them; ``told``:
        what preparing the files did, said before the plan is written (which may refuse); ``recorded``:
        the manifest a resume read when it numbered the tasks, which the plan is checked against."""
        if not resuming and self.cleared is None:
            raise RuntimeError("a fresh run clears its agents (``clear``) before it moves anything")
        self.take(
            run_id,
            resuming=resuming,
            overwrite=settings.overwrite,
            retry_invalid=settings.retry_invalid_judge_responses,
        )
        if told is not None:
            told(self.start)
        try:
            return build_plan(
                tasks,
                self.paths,
                settings,
                manifest,
                resuming=resuming,
                shown=shown,
                shaping=shaping,
                records=not self.start.joined,
                recorded=recorded,
            )
        except (PlanError, ArtifactError) as exc:  # damaged recorded files; a full disk before anything was sent
            raise self.refuse(str(exc), where="prepare") from None

    def take(self, run_id: str, *, resuming: bool, overwrite: bool, retry_invalid: bool = False) -> RunStart:
        """The files prepared once per run: earlier results moved aside (deleted with ``overwrite``
        once the first request goes), or repaired and mended (``retry_invalid``: judged-invalid
        results to the sidecar), resuming. What it did, for the door to tell."""
        self.resuming = resuming
        mend = None
        if resuming:  # imported here: a fresh run has no results to mend
            from pytest_rollouts.rows.judge_retry import resume_mend

            mend = resume_mend(self.paths, retry_invalid)
        try:
            self.start = self.paths.start_run(run_id, resume=resuming, overwrite=overwrite, mend=mend)
        except OSError as exc:  # a read-only or missing place: nothing was sent
            raise Refusal(f"cannot write the artifacts next to {self.paths.out}: {exc}", where="prepare") from None
        self.prepared = True
        return self.start

    def refuse(self, why: str, *, exit_status: int = USAGE, where: str = "", lines: Sequence[str] = ()) -> Refusal:
        """The refusal of a run that sent nothing, its files put back (what it says of them added)."""
        return Refusal(why, exit_status, where, tuple(lines), self.put_back())

    def put_back(self) -> str:
        """A run refused before any request leaves the files as it found them, the lock file too;
        what to add to the refusal. Not where this process does not own the files (an xdist worker)."""
        if not self.owner:
            return ""
        back = put_back(self.paths, self.start, resuming=self.resuming) if self.prepared else ""
        if self.lock is not None:
            self.lock.withdraw()
        return back

    def put_back_unsent(self) -> str:
        """A fresh run stopped before its first request (Ctrl-C while agents start) leaves the files
        as it found them, as a refusal does; what to tell. Once a row is written it is a run to
        resume instead: the dispatcher may have begun before the stop reached it."""
        paths, start = self.paths, self.start
        if not self.owner:
            return ""
        if self._clearing and not self.prepared:  # stopped while the agents started or answered
            self.put_back()
            return "Interrupted before any request was sent: nothing was moved or written."
        if not self.prepared or self.resuming:
            return ""
        if any(path.exists() and path.stat().st_size for path in (paths.out, paths.failures)):
            paths.discard(start)
            return ""
        self.put_back()
        kept = "the earlier results are back in place" if start.moved_to is not None else "its files are removed"
        return f"Interrupted before any request was sent: {kept}."

    # -- dispatch --------------------------------------------------------------------------

    def sent(self) -> None:
        """The run sent its first request: what ``overwrite`` replaces is gone for good."""
        self.paths.discard(self.start)

    # -- score, conclude, publish ----------------------------------------------------------

    @staticmethod
    def load_scoring() -> None:
        """Import what ``score`` runs, for a door to call while it waits for the dispatcher to take the
        plan or send the first results: the imports then cost the run's end nothing (at one row, most
        of that end). ``power``: ``run_statistics`` takes it at the end."""
        from pytest_rollouts.scoring import configured, power  # noqa: F401

    def score(
        self,
        settings: Settings,
        *,
        agent_url: Callable[[str], str | None],
        coverage_only: bool = False,
        perf_summary: dict[str, Any] | None = None,
        outputs: OutputScan | None = None,
        drained: frozenset[Key] = frozenset(),
        trace: RunTrace | None = None,
        dispatch: Mapping[str, Mapping[str, Any]] | None = None,
        post: MetricsPost | None = None,
    ) -> RunScore:
        """The run scored from its files on disk (``coverage_only``: a stopped run says what it
        covered); a row that cannot be read refuses the score. ``dispatch``: each agent's entry
        of how dispatch went (``dispatch/record.py``), for the metrics file; ``post``: who sends
        ``/aggregate_metrics`` (``score_run``).

        Scoring is imported here: an xdist worker, which never scores, does not pay for it."""
        from pytest_rollouts.scoring.configured import score_configured

        try:
            score = score_configured(
                self.paths,
                settings,
                agent_url=agent_url,
                coverage_only=coverage_only,
                perf_summary=perf_summary,
                outputs=outputs,
                drained=drained,
                dispatch=dispatch,
                post=post,
            )
        except JsonlError as exc:
            raise Refusal(f"cannot score the run: {exc}", where="score") from None
        if trace is not None:
            trace.scored(score)
        return score

    # The verdict of the run's gates (``Gate.of(settings)``, or a door's own option names); a run
    # not scored is judged by its end alone. A pytest session not holding a run judges it the same.
    conclude = staticmethod(judge_run)

    def publish(
        self,
        settings: Settings,
        score: RunScore,
        verdict: Verdict,
        html: Path | None,
        secrets: Callable[[], Redactor],
        *,
        stops: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> Published:
        """The report (``html``), then the exports, which log it; neither fails the run.

        A stop (``KeyboardInterrupt``: Ctrl-C, or SIGTERM as a door turns it into one) while either
        goes on withdraws the run's conclusions, as a stop while scoring does, and raises
        ``PublishStopped``. ``stops``: the door's guard that lets a stop through here (a pytest
        session holds stops once its run loop ended, and raises one held already on entry)."""
        report, lines, stage = "", [], "Interrupted before publishing"
        try:
            with stops():
                if html is not None:
                    from pytest_rollouts.report.build import report_at_end

                    stage, self._reporting = "Interrupted while writing the report", html
                    report = report_at_end(html, self.paths.out, score, verdict)
                if settings.wandb or settings.mlflow:  # nothing imported for a run asking neither
                    from pytest_rollouts.export.exports import ExportInterrupted, export_run

                    destinations = {"wandb": settings.wandb, "mlflow": settings.mlflow}
                    stage = "Interrupted while exporting"
                    lines = export_run(destinations, score, self.paths.out, html, secrets=secrets())
        except KeyboardInterrupt as stop:
            if stage.endswith("exporting") and isinstance(stop, ExportInterrupted):
                stage, lines = str(stop), stop.lines  # which export it cut short, what those before it said
            raise PublishStopped(f"{stage}: {self.withdraw_conclusions()}", lines) from None
        return Published(report, tuple(lines))

    def withdraw_conclusions(self) -> str:
        """Scoring or publishing was stopped part-way: a metrics file (an earlier session's, or this
        one's) and a report this run began would contradict the rows, so they go; every row stays,
        and a resume scores them. What to tell."""
        self.paths.metrics.unlink(missing_ok=True)
        report, self._reporting = self._reporting, None
        if report is not None and report.is_file() and not report.is_symlink():
            report.unlink()
        return "no metrics file written"


def _health_header(settings: Settings, checked: Mapping[str, str]) -> PlanHeader | None:
    """The header of a plan for the ``checked`` agents, which says what their checks need (their
    headers, redaction, ``--rollouts-health-workers`` and ``-ignore``); None when none is asked."""
    if settings.no_health_check or not checked:
        return None
    return PlanHeader.of(settings, checked, parallel=settings.parallel, limit=1)
