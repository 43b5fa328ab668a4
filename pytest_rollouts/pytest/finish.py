"""The end of a session that holds a rollouts run: score the run once and take its verdict.

The rules (which exit status a run asks for, what fails it) are the core's, in
``scoring/verdict.py``. Here pytest's facts are gathered for them, the run is scored on the
process that owns it (not an xdist worker: through the lifecycle, with the session's read-ahead
of the outputs), and a worker hands its news to its controller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.datatype import datatype
from pytest_rollouts.pytest.progress import tell
from pytest_rollouts.pytest.role import DISPATCH_FAILURE, REFUSAL, WORKER_REPORT, refused_by_workers, role
from pytest_rollouts.pytest.stash import DISPATCH_STOPPED, RUN_KEY
from pytest_rollouts.scoring.gate import Gate
from pytest_rollouts.scoring.verdict import RunEnd, Verdict, judge_run

if TYPE_CHECKING:
    from pytest_rollouts.pytest.session import RolloutRun
    from pytest_rollouts.pytest.tally import Tally
    from pytest_rollouts.scoring.aggregate import RunScore


@datatype
class Ending:
    """What the session's end decided, for its exit status and its ``rollouts`` section."""

    verdict: Verdict
    score: RunScore | None = None
    # An xdist run refused before any request, its files put back as found: what was said of it.
    put_back: str = ""


def end_run(config: pytest.Config, session: pytest.Session, tally: Tally, say: Callable[[str], None]) -> Ending:
    """Hand a worker's news to its controller, put back the files of an xdist run no worker sent
    anything for (``say`` shows what was done, at once), then score the run where it is owned (a
    run the user stopped: only what it covered) and judge it."""
    run: RolloutRun | None = config.stash.get(RUN_KEY, None)
    end = _run_end(config, session, tally, run)
    this = role(config)
    if this.worker and run is not None:
        this.tell_controller(_worker_news(run))
    put_back = ""
    refused = refused_by_workers(config) is not None  # under xdist: a usage error too
    if (end.exit_status == pytest.ExitCode.INTERRUPTED or refused) and run is not None and this.owns_run:
        put_back = run.workers.put_back_unsent(run.numbering.resuming) or run.put_back_unsent()
        if put_back:
            say(put_back)
    not_here = this.worker or config.option.collectonly
    if not_here or not end.scored or put_back or (run is None and not tally.items):
        if run is not None:
            run.close(wait=False)
        return Ending(judge_run(None, end), put_back=put_back)
    from pytest_rollouts.pytest.session import RolloutRun

    run = RolloutRun.get(config)
    try:
        with run.stops.interruptible():
            score = score_session(
                run,
                tally.perf_summary() if tally.items else None,
                frozenset(tally.drained),
                coverage_only=end.interrupted,
            )
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while scoring: say so, as at any other moment
        return _stopped(end, f"Interrupted while scoring: {run.life.withdraw_conclusions()}", put_back)
    finally:
        run.close(wait=False)  # its dispatcher exits while the summary is written
    verdict = run.life.conclude(score, end, Gate.of(run.settings))
    if score is not None and not end.interrupted:
        from pytest_rollouts.lifecycle.stages import PublishStopped

        try:
            publish(run, score, verdict, say)
        except PublishStopped as stop:
            return _stopped(end, str(stop), put_back)
    return Ending(verdict, score, put_back)


def _stopped(end: RunEnd, why: str, put_back: str) -> Ending:
    """A run stopped while it was scored or published: its conclusions were withdrawn (``why``
    says where the stop came), every row stays, and a resume scores them."""
    stopped = f"{why}; --rollouts-resume scores the run (none with a row is sent again)"
    verdict = replace(judge_run(None, end), exit_code=pytest.ExitCode.INTERRUPTED, stopped=stopped)
    return Ending(verdict, put_back=put_back)


def _worker_news(run: RolloutRun) -> dict[str, Any]:
    """What a worker tells its controller: what it did with the files, why its dispatch stopped,
    why it refused the run."""
    news: dict[str, Any] = {
        WORKER_REPORT: run.workers.report(
            run.dispatched,
            run.sent,
            run.life.start,
            run.numbering.unmatched,
            run.numbering.resuming,
            (role(run.config).worker_id, run.dispatch_record),
        )
    }
    if run.dispatch_failure:
        news[DISPATCH_FAILURE] = run.dispatch_failure
    usage = int(pytest.ExitCode.USAGE_ERROR)
    refusal = run.workers.refusal or ((run.numbering.refusal, usage) if run.numbering.refusal else None)
    if refusal is not None:
        news[REFUSAL] = list(refusal)
    return news


def publish(run: RolloutRun, score: RunScore, verdict: Verdict, say: Callable[[str], None]) -> None:
    """The report (``--rollouts-html``) and the exports (``--rollouts-wandb``, ``--rollouts-mlflow``),
    each said where it went or why not (the files are written and the exit status stands); a stop
    cuts them short (``PublishStopped``, after what the exports before it said)."""
    from pytest_rollouts.lifecycle.stages import PublishStopped

    report = run.settings.html  # made absolute where the settings are resolved
    try:
        published = run.life.publish(
            run.settings, score, verdict, report, run.agents.secrets, stops=run.stops.interruptible
        )
    except PublishStopped as stop:
        for line in stop.lines:
            say("rollouts: " + line)
        raise
    if report is not None:
        tell(run.config, published.report.replace(str(report), run.shown(report)))
    for line in published.exports:
        say("rollouts: " + line)


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
            post=None if run.lingering is None else run.lingering.post_metrics,
        )
    except Refusal as refusal:
        raise pytest.UsageError(str(refusal)) from None


def _metrics_url(run: RolloutRun, name: str) -> str | None:
    """Where a group's ``/aggregate_metrics`` lives (an embedded agent not running yet is started);
    None (local metrics) for an agent not configured now. An xdist controller collects nothing, so
    it learns suite agents from the datasets the manifest records."""
    from pytest_rollouts.config.agents import AgentsError

    try:
        recorded = run.numbering.recorded_datasets
        return None if run.agents.is_model(name, recorded) else run.agents.urls({name}, recorded)[name]
    except (AgentsError, pytest.UsageError):
        return None


def _run_end(config: pytest.Config, session: pytest.Session, tally: Tally, run: RolloutRun | None) -> RunEnd:
    """pytest's facts, as the run's rules read them. Those that read the run's files (and may
    resolve its settings) are asked only with the status they count with (``RunEnd`` says which)."""
    status = session.exitstatus
    maxfail = config.option.maxfail
    stopped_by = role(config).stopped_by(config)
    return RunEnd(
        status=status,
        began=status == pytest.ExitCode.INTERRUPTED and bool(tally.items or (run is not None and run.began())),
        dispatch_failure=run.dispatch_failure if run is not None else "",
        failed_items=session.testsfailed,
        rollout_failed_items=tally.failed_items,
        cut_short=bool(maxfail) and session.testsfailed >= maxfail,
        stopped_by_dispatch=stopped_by == DISPATCH_STOPPED,
        no_task_here=status == pytest.ExitCode.NO_TESTS_COLLECTED and run is not None and run.holds_no_task(),
    )
