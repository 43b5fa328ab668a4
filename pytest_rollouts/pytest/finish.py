"""The end of a session that holds a rollouts run: score the run once and take its verdict.

The rules (which exit status a run asks for, what fails it) are the core's, in
``scoring/verdict.py``. Here pytest's facts are gathered for them, the run is scored on the
process that owns it (not an xdist worker), and a worker hands its news to its controller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.pytest.progress import tell
from pytest_rollouts.pytest.role import role
from pytest_rollouts.pytest.scoring import score_session, scoring_interrupted
from pytest_rollouts.pytest.stash import DISPATCH_STOPPED, RUN_KEY
from pytest_rollouts.scoring.gate import Gate
from pytest_rollouts.scoring.verdict import RunEnd, Verdict, judge_run

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_rollouts.pytest.session import RolloutRun
    from pytest_rollouts.pytest.tally import Tally
    from pytest_rollouts.scoring.aggregate import RunScore

# The ``workeroutput`` keys under which an xdist worker tells its controller why its dispatch
# stopped, and what it did with the files (``Workers.report``).
DISPATCH_FAILURE = "rollouts_dispatch_failure"
WORKER_REPORT = "rollouts_worker_report"
# ... and why it refused the run while collecting (``SessionPlan.number_tasks``).
# Why a worker refused the run before any request, and the exit status one process gives for it.
REFUSAL = "rollouts_refusal"
# On a controller, the first refusal a worker told; also where no rollouts option made it a run.
REFUSAL_KEY = pytest.StashKey[tuple[str, int]]()


@dataclass(frozen=True)
class Ending:
    """What the session's end decided, for its exit status and its ``rollouts`` section."""

    verdict: Verdict
    score: RunScore | None = None
    # An xdist run refused before any request, its files put back as found: what was said of it.
    put_back: str = ""


def hear_worker(config: pytest.Config, node: Any) -> None:
    """On an xdist controller: what a worker that went down said of its part, and why its dispatch
    stopped (the controller's section repeats it), or why it refused the run."""
    output = getattr(node, "workeroutput", {})
    if output.get(REFUSAL):
        why, code = output[REFUSAL]
        config.stash.setdefault(REFUSAL_KEY, (why, code))
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return
    run.workers.hear(output.get(WORKER_REPORT))
    failure = output.get(DISPATCH_FAILURE)
    if failure and not run.dispatch_failure:
        run.dispatch_failure = failure


def refused_by_workers(config: pytest.Config) -> tuple[str, int] | None:
    """On an xdist controller: why its workers refused the run before any request (while collecting,
    or preparing it), with the exit status one process gives for it; None if they did not."""
    return config.stash.get(REFUSAL_KEY, None)


def end_run(config: pytest.Config, session: pytest.Session, tally: Tally, say: Callable[[str], None]) -> Ending:
    """Hand a worker's news to its controller, put back the files of an xdist run no worker sent
    anything for (``say`` shows what was done, at once), then score the run where it is owned (a
    run the user stopped: only what it covered) and judge it."""
    run: RolloutRun | None = config.stash.get(RUN_KEY, None)
    end = _run_end(config, session, tally, run)
    this = role(config)
    workeroutput = getattr(config, "workeroutput", None)
    if this.worker and workeroutput is not None and run is not None:
        start = run.life.start
        workeroutput[WORKER_REPORT] = run.workers.report(
            run.dispatched,
            run.sent,
            start,
            run.planning.unmatched,
            run.planning.resuming,
            (str(this.workerinput.get("workerid", "")), run.dispatch_record),
        )
        if run.dispatch_failure:
            workeroutput[DISPATCH_FAILURE] = run.dispatch_failure
        usage = int(pytest.ExitCode.USAGE_ERROR)
        refusal = run.workers.refusal or ((run.planning.refusal, usage) if run.planning.refusal else None)
        if refusal is not None:
            workeroutput[REFUSAL] = list(refusal)
    put_back = ""
    refused = refused_by_workers(config) is not None  # under xdist: a usage error too
    if (end.exit_status == pytest.ExitCode.INTERRUPTED or refused) and run is not None and this.owns_run:
        put_back = run.workers.put_back_unsent(run.planning.resuming) or run.put_back_unsent()
        if put_back:
            say(put_back)
    not_here = this.worker or config.option.collectonly
    if not_here or not end.scored or put_back or (run is None and not tally.items):
        if run is not None:
            run.close()
        return Ending(_unscored(end), put_back=put_back)
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
        unscored = _unscored(end)
        stopped = scoring_interrupted(run)
        return Ending(replace(unscored, exit_code=pytest.ExitCode.INTERRUPTED, stopped=stopped), put_back=put_back)
    finally:
        run.close()
    verdict = run.life.conclude(score, end, Gate.of(run.settings))
    if score is not None and not end.interrupted:
        publish(run, score, verdict, say)
        stopped = export(run, score, say, run.settings.html)  # after the report, which the exports log
        if stopped:
            verdict = replace(verdict, exit_code=pytest.ExitCode.INTERRUPTED, problems=(*verdict.problems, stopped))
    return Ending(verdict, score, put_back)


def _unscored(end: RunEnd) -> Verdict:
    """The verdict of a run not scored here: no gate applies. Every session ends here, so the
    lifecycle (and what it imports) is left to sessions that hold a run."""
    return judge_run(None, end, Gate())


def publish(run: RolloutRun, score: RunScore, verdict: Verdict, say: Callable[[str], None]) -> None:
    """The report (``--rollouts-html``), said where it went or why not (the files are written and
    the exit status stands)."""
    report = run.settings.html  # made absolute where the settings are resolved
    if report is not None:
        published = run.life.publish(run.settings, score, verdict, report, run.agents.secrets, exports=False)
        tell(run.config, published.report.replace(str(report), run.shown(report)))


def export(run: RolloutRun, score: RunScore, say: Callable[[str], None], report: Path | None) -> str:
    """Log the scored run where ``--rollouts-wandb`` and ``--rollouts-mlflow`` ask, a ``rollouts:``
    line each saying where it went or, failed, why (the files are written and the exit status
    stands). A stop cuts them short (the results are on disk): why, else "". Nothing is imported
    for a run that asks for neither."""
    settings = run.settings
    if not (settings.wandb or settings.mlflow):
        return ""
    from pytest_rollouts.export.exports import ExportInterrupted, export_run

    destinations = {"wandb": settings.wandb, "mlflow": settings.mlflow}
    lines: list[str] = []
    try:
        with run.stops.interruptible():
            lines = export_run(destinations, score, run.paths.out, report, secrets=run.agents.secrets())
    except ExportInterrupted as stop:
        lines = stop.lines
        return str(stop)
    except KeyboardInterrupt:  # one held since the run loop ended
        return "Interrupted before exporting: the run's results are on disk, unexported"
    finally:
        for line in lines:
            say("rollouts: " + line)
    return ""


def _run_end(config: pytest.Config, session: pytest.Session, tally: Tally, run: RolloutRun | None) -> RunEnd:
    """pytest's facts, as the run's rules read them. Those that read the run's files (and may
    resolve its settings) are asked only with the status they count with (``RunEnd`` says which)."""
    status = session.exitstatus
    maxfail = config.option.maxfail
    # xdist's session, on a controller: what stopped it.
    stopped_by = getattr(config.pluginmanager.get_plugin("dsession"), "shouldstop", None)
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
