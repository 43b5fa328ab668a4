"""What pytest shows about rollouts: per-item status words and the closing summary.

Everything here is read from test reports (``user_properties``), which travel from
xdist workers to the controller, so the same code serves one process or many.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.scoring.summary import score_lines
from pytest_rollouts.rows.records import dominant_class
from pytest_rollouts.pytest.properties import (
    CACHED,
    DRAINED,
    ELAPSED,
    FAILURES,
    GIVEN_UP,
    REWARDS,
    rollout_properties,
)
from pytest_rollouts.pytest.stash import DISPATCH_STOPPED, RUN_KEY

# The ``workeroutput`` keys under which an xdist worker tells its controller why its dispatch
# stopped, and what it did with the files (``RolloutRun.worker_report``).
DISPATCH_FAILURE = "rollouts_dispatch_failure"
WORKER_REPORT = "rollouts_worker_report"

if TYPE_CHECKING:
    from pytest_rollouts.scoring.aggregate import RunScore
    from pytest_rollouts.scoring.gate import GateFailure

# pytest's own report categories; a failure class of the same name would be miscounted
# (and crash the ``-rs`` summary, which expects real skips), so it is shown prefixed.
PYTEST_CATEGORIES = frozenset(
    {"passed", "failed", "skipped", "error", "xfailed", "xpassed", "deselected", "warnings", "rerun"}
)
SHOWN_FAILURES = 10
# A passed (or skipped: drained) rollout item while the loop runs: no letter, and no reward list
# formatted for a word only -v shows (one is needed all the same: pytest counts progress by
# items with one).
QUIET_PASSED = ("passed", "", "PASSED")
QUIET_SKIPPED = ("skipped", "", "SKIPPED")


def teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    """Failed rollouts report under their class, so the summary reads ``3 agent_run_error``."""
    props = rollout_properties(report)
    if props is None:
        return None
    if report.failed and FAILURES in props:
        category = dominant_class(props[FAILURES])
        if category in PYTEST_CATEGORIES:
            category = "rollout_" + category
        return category, "F", category.upper()
    if report.passed:
        rewards = " ".join(_fmt(r) for r in props.get(REWARDS, ()))
        cached = f"; {props[CACHED]} cached" if CACHED in props else ""
        return "passed", ".", f"PASSED (reward {rewards}{cached})"
    return None


def _slim(report: pytest.TestReport) -> None:
    """Drop what nothing reads once a passed rollout report is logged (trylast: everyone has seen it).

    The terminal reporter keeps every report to the end; at 100k items their keyword dicts
    and property lists are ~60 MB. (pytest copies the item's property list into the report;
    the lean loop drops the item's.) junitxml reads properties later, so runs with it keep them.
    """
    report.keywords = _NO_KEYWORDS
    report.user_properties.clear()


_NO_KEYWORDS: Mapping[str, Any] = MappingProxyType({})


def _fmt(reward: float | None) -> str:
    return "-" if reward is None else f"{reward:g}"


@dataclass
class Tally:
    """What this session's rollout items reported, and when the run began."""

    started_at: float = field(default_factory=time.perf_counter)
    last_at: float = 0.0
    items: int = 0
    reward_sum: float = 0.0
    rewarded: int = 0
    unrewarded: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    failed_items: int = 0
    examples: list[str] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    drained: set[tuple[int, int]] = field(default_factory=set)
    given_up: int = 0

    def add(self, report: pytest.TestReport) -> None:
        props = rollout_properties(report)
        if props is None:
            return
        self.items += 1
        self.last_at = time.perf_counter()
        unscored = 0
        for reward in props.get(REWARDS, ()):
            if reward is None:
                unscored += 1
            else:
                self.reward_sum += reward
                self.rewarded += 1
        elapsed = props.get(ELAPSED, ())
        if elapsed and not self.durations:
            # Dispatch began no later than the first reported rollout's start: on an xdist
            # controller the loop starts a worker start-up earlier, which is not dispatch time.
            self.started_at = max(self.started_at, self.last_at - max(elapsed))
        self.durations.extend(elapsed)
        self.drained.update((task, rollout) for task, rollout in props.get(DRAINED, ()))
        failures = props.get(FAILURES, {})
        self.failures.update(failures)
        self.given_up += props.get(GIVEN_UP, 0)
        # A failure has no reward either: what is left is a result whose reply carried none.
        self.unrewarded += unscored - sum(failures.values())
        if report.failed and failures:
            self.failed_items += 1
            if len(self.examples) < SHOWN_FAILURES:
                # A report from an xdist worker starts with the worker's name and Python.
                lines = report.longreprtext.splitlines()
                reason = next((line for line in lines if line.startswith("rollout ")), lines[0] if lines else "")
                self.examples.append(f"{report.nodeid} {reason}")

    def lines(self) -> list[str]:
        failed = sum(self.failures.values())
        total = self.rewarded + self.unrewarded + failed
        by_class = ", ".join(f"{name} {count}" for name, count in sorted(self.failures.items()))
        lines = [
            f"{self.rewarded} of {total} rollouts scored"
            + (f"; {self.unrewarded} results without a numeric reward" if self.unrewarded else "")
            + (f"; failed: {by_class}" if failed else "")
        ]
        if self.given_up:
            lines.append(
                f"{self.given_up} rollouts used their last attempt and no resume sends them again; to try them again, "
                "resume with a higher --rollouts-max-attempts (env NEMO_GYM_MAX_ROLLOUT_ATTEMPTS)"
            )
        elapsed = max(self.last_at - self.started_at, 1e-9)
        ran = len(self.durations)
        lines.append(
            f"{ran / elapsed:.1f} rollouts/s, {self.per_hour():.0f} rollouts/hour ({ran} ran in {elapsed:.2f}s)"
        )
        from pytest_rollouts.scoring.metrics import latency_summary

        latency = latency_summary(self.durations)
        if latency["count"]:
            lines.append(
                "latency p50 {p50:.3f}s, p90 {p90:.3f}s, p99 {p99:.3f}s, max {max:.3f}s over {count} rollouts".format(
                    **latency
                )
            )
        if self.examples:
            lines.append("failed items:")
            lines.extend("  " + example for example in self.examples)
            if self.failed_items > len(self.examples):
                lines.append(f"  ... and {self.failed_items - len(self.examples)} more (see the failures sidecar)")
        return lines

    def per_hour(self, now: float | None = None, sent: int | None = None) -> float:
        """Rollouts sent this session per hour of dispatch, up to the last report or ``now``
        (``time.perf_counter``). Cached and drained ones were not sent, so they do not count.
        ``sent``: a count ahead of the reports (the dispatcher's), for the progress line."""
        end = self.last_at if now is None else now
        return 3600 * (len(self.durations) if sent is None else sent) / max(end - self.started_at, 1e-9)

    def perf_summary(self) -> dict[str, float | int | None]:
        from pytest_rollouts.scoring.metrics import latency_summary

        return {**latency_summary(self.durations), "rollouts_per_hour": self.per_hour()}

    def mean_line(self) -> list[str]:
        """Used only when no metrics were computed (``--rollouts-no-aggregate``)."""
        if not self.rewarded:
            return []
        mean = self.reward_sum / self.rewarded
        return [f"mean reward {mean:.4f} over {self.rewarded} rollouts reported this session"]


def _resume_line(score: RunScore | None) -> str:
    """What a run the user stopped leaves to do, and how."""
    if score is None:
        return "Interrupted: --rollouts-resume goes on with this run"
    left = score.coverage.expected - score.coverage.completed
    if not left:
        return "Interrupted with every materialized rollout written: --rollouts-resume scores the run (sending nothing)"
    return (
        f"Interrupted with {left} of {score.coverage.expected} materialized rollouts without a row: "
        "--rollouts-resume runs them, up to the attempt cap (none with a row is sent again)"
    )


@dataclass
class Progress:
    """When to show progress: every few seconds on a terminal (one line redrawn in place), every
    10% or 5 minutes in a log (a plain line each time)."""

    tty: bool
    total: int = 0
    last_at: float = field(default_factory=time.monotonic)
    last_done: int = 0

    # A redraw in place costs nothing on screen; a new line (a -v session) is kept rarer.
    tty_every_s: float = 5.0
    LIVE_EVERY_S = 2.0
    LOG_EVERY_S = 300.0
    LOG_EVERY_FRACTION = 0.1

    def due(self, done: int) -> bool:
        now = time.monotonic()
        if self.tty:
            ready = now - self.last_at >= self.tty_every_s
        else:
            step = max(1, int(self.total * self.LOG_EVERY_FRACTION))
            ready = now - self.last_at >= self.LOG_EVERY_S or done - self.last_done >= step
        if ready and done < self.total:
            self.last_at, self.last_done = now, done
            return True
        return False


CLEAR_TO_END = "\x1b[K"


def _line_start(terminal: Any) -> str:
    """What pytest wrote at the start of the current line: the dataset's path and a space."""
    if terminal.currentfspath is None:
        return ""
    return os.path.relpath(terminal.currentfspath, terminal.startpath) + " "


def progress_line(
    tally: Tally,
    total: int,
    in_flight: tuple[int, float | None, list[int] | None] | None,
    finished: tuple[int, int, dict[str, int]] | None = None,
) -> str:
    """``finished``: the dispatcher's (tasks finished, rollouts sent, failures by class). It runs
    ahead of the items pytest reports in plan order; a resumed run's settled items it never sees,
    so each figure is the larger of the two."""
    from pytest_rollouts.scoring.metrics import latency_summary

    latency = latency_summary(tally.durations)
    done, sent, failures = tally.items, len(tally.durations), tally.failures
    if finished is not None:
        done, sent, failures = max(done, finished[0]), max(sent, finished[1]), failures | Counter(finished[2])
    parts = [f"rollouts: {done}/{total} tasks done"]
    if in_flight is not None:
        parts.append(f"{in_flight[0]} in flight")
    # Up to now: a line written while a slow rollout holds the run up shows the rate falling.
    parts.append(f"{tally.per_hour(time.perf_counter(), sent):.0f}/h")
    if latency["count"]:
        parts.append(f"p50 {latency['p50']:.2f}s p90 {latency['p90']:.2f}s")
    if failures:
        parts.append("failures: " + ", ".join(f"{n} {c}" for n, c in sorted(failures.items())))
    if in_flight is not None and in_flight[2] is not None and in_flight[1] is not None:
        task, rollout = in_flight[2]
        parts.append(f"oldest in flight: task {task} rollout {rollout}, {in_flight[1]:.0f}s")
    return ", ".join(parts)


class RolloutReporter:
    """Registered in every session; it stays silent until a rollout item reports.

    On the process that owns the run (not an xdist worker) it scores the run once at
    session end, applies the CI gate, and prints the ``rollouts`` section.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tally = Tally()
        self.score: RunScore | None = None
        self.gate: GateFailure | None = None
        # An xdist run refused before any request, its files put back as found: what was said of it.
        self.put_back = ""
        # How a run the user stopped ended, for its section: "" when it was not stopped.
        self.stopped = ""
        self.progress = Progress(tty=sys.stdout.isatty())
        # Without -v, a session of rollout items only shows no letter per item: its progress
        # lines say more, and at 100k items a log of dots says nothing. On a terminal the
        # status line is redrawn in place (live); in a log it is a line every 10% or 5 minutes.
        self.quiet = False
        self.live = False
        # The dataset pytest had named when the last progress line was written in a log.
        self.progress_after: object = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The rollout items that will run: after every deselection, --lf's wrapper included."""
        if RUN_KEY not in session.config.stash:  # no dataset, no rollouts option: spare the import
            return
        from pytest_rollouts.pytest.items import RolloutItem

        self.progress.total = sum(isinstance(item, RolloutItem) for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker whose dispatch stopped says why; the controller's section repeats it."""
        output = getattr(node, "workeroutput", {})
        failure = output.get(DISPATCH_FAILURE)
        run = self.config.stash.get(RUN_KEY, None)
        if run is None:
            return
        run.hear_worker(output.get(WORKER_REPORT))
        if failure and not run.dispatch_failure:
            run.dispatch_failure = failure

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller has only node ids: a rollout item's is its dataset's, a ``.jsonl`` file."""
        self.progress.total = sum(nodeid.split("::", 1)[0].endswith(".jsonl") for nodeid in ids)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """Inside the plugin's wrapper, so after dispatch started, and before any loop runs an
        item: the engine's heartbeat drives progress from here on, too."""
        self._watch()
        try:
            return (yield)
        finally:
            self.quiet = False  # summaries after the loop (-rA) ask again, and show the words

    def _watch(self) -> None:
        self.tally.started_at = time.perf_counter()
        run = self.config.stash.get(RUN_KEY, None)
        if run is None:
            return
        self.quiet = run.lean and self.config.get_verbosity() <= 0
        self.live = self.quiet and self.progress.tty
        if self.live:
            self.progress.tty_every_s = Progress.LIVE_EVERY_S
        run.on_heartbeat = self._heartbeat

    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        if not getattr(report, "user_properties", None):
            return None
        if self.quiet and report.when == "call" and (report.passed or report.skipped):
            return QUIET_PASSED if report.passed else QUIET_SKIPPED
        status = teststatus(report)
        if status is not None and self.quiet:
            return status[0], "", status[2]
        return status

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.user_properties and report.when == "call":
            self.tally.add(report)
            if self.live and self.tally.items == self.progress.total:
                self._show_progress(final=True)
            elif self.progress.due(self.tally.items):
                self._show_progress()
            if report.passed and not self.config.option.xmlpath:
                _slim(report)
            elif report.skipped and isinstance(report.longrepr, tuple) and rollout_properties(report):
                # pytest names where the skip was raised (in this plugin); the place to look is the dataset.
                where = str(self.config.rootpath / report.location[0])
                report.longrepr = (where, None, report.longrepr[2])

    def _heartbeat(self) -> None:
        """The engine reports what is in flight with its results and every 2 s while pytest waits:
        progress stays live when no item finishes.

        Not with -v: pytest has half-written the item's line, which a progress line would split.
        """
        if (self.live or self.config.get_verbosity() <= 0) and self.progress.due(self.tally.items):
            self._show_progress()

    def _show_progress(self, *, final: bool = False) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            return
        run = self.config.stash.get(RUN_KEY, None)
        line = (
            ""
            if final
            else progress_line(self.tally, self.progress.total, run and run.in_flight(), run and run.finished())
        )
        if self.live:
            # Straight to the terminal, after the file name pytest put at the start of the line,
            # so pytest's idea of the line is unchanged. The last redraw leaves only that name,
            # for pytest's [100%]; the summary section then has the final numbers.
            sys.stdout.write(f"\r{_line_start(terminal)}{line}{CLEAR_TO_END}")
            sys.stdout.flush()
            return
        if self.quiet:
            # Whole lines below the dataset's name, which pytest (unlike after write_line) then
            # does not write again: the line is only open when pytest has just named a dataset.
            named = terminal.currentfspath is not None and terminal.currentfspath != self.progress_after
            terminal.write(("\n" if named else "") + line + "\n", flush=True)
            self.progress_after = terminal.currentfspath
            return
        self._own_line(terminal, line)

    def _own_line(self, terminal: Any, line: str) -> None:
        terminal.ensure_newline()
        if self.config.get_terminal_writer().width_of_current_line:
            # Letters with no file name before them (xdist's), which write_line would not end.
            terminal.write("\n")
        terminal.write_line(line)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        """Around the other plugins' session ends (inside the terminal reporter's, which prints the
        section after): xdist's controller waits there for its workers to exit, and a stop landing
        then (Ctrl-C, SIGTERM) must still end in the section, not a traceback."""
        try:
            yield
        except KeyboardInterrupt:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        self._finish(session)

    def _finish(self, session: pytest.Session) -> None:
        """Settle the exit status; then score the run and apply the gate (or, for a run the user
        stopped, only state what it covered)."""
        run = self.config.stash.get(RUN_KEY, None)
        self._settle_status(session, run)
        interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED and bool(
            self.tally.items or (run is not None and run.began())
        )
        scoring_states = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None and run is not None:
            workeroutput[WORKER_REPORT] = run.worker_report()
            if run.dispatch_failure:
                workeroutput[DISPATCH_FAILURE] = run.dispatch_failure  # for the controller's section
        if session.exitstatus == pytest.ExitCode.INTERRUPTED and run is not None and workeroutput is None:
            self.put_back = run.put_back_unsent()
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            if self.put_back and terminal is not None:
                self._own_line(terminal, self.put_back)
        not_here = hasattr(self.config, "workerinput") or self.config.option.collectonly
        if not_here or (session.exitstatus not in scoring_states and not interrupted):
            if run is not None:
                run.close()
            return
        if run is None and not self.tally.items:
            return
        from pytest_rollouts.scoring.gate import check_gate
        from pytest_rollouts.pytest.session import RolloutRun

        run = RolloutRun.get(self.config)
        try:
            with run.stops.interruptible():
                self.score = run.score(
                    self.tally.perf_summary() if self.tally.items else None,
                    frozenset(self.tally.drained),
                    coverage_only=interrupted,
                )
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while scoring: say so, as at any other moment
            session.exitstatus = pytest.ExitCode.INTERRUPTED
            self.stopped = run.scoring_interrupted()
            return
        finally:
            run.close()
        if interrupted:
            self.stopped = _resume_line(self.score)
        if self.score is None or interrupted:
            return
        if self.score.metrics_error and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a run whose metrics are lost is no success
        settings = run.settings
        self.gate = check_gate(
            self.score.coverage,
            self.score.mean_reward,
            out=str(settings.out),
            require_complete=settings.require_complete,
            fail_under=settings.fail_under,
        )
        if self.gate is not None:  # the gate's verdict is the more specific one
            session.exitstatus = self.gate.exit_code

    def _settle_status(self, session: pytest.Session, run: Any) -> None:
        """Failure classes alone leave the exit status 0; a run cut short or missing rows does not."""
        maxfail = self.config.option.maxfail
        # -x or --maxfail stopped the run: rollouts were left unsent, so it did not succeed.
        cut_short = bool(maxfail) and session.testsfailed >= maxfail
        # xdist ends a run that -x, --maxfail or a failed dispatch stopped as interrupted (2), one
        # process as failed (1): the same run, so the same status, score and gate.
        stopped_by = getattr(self.config.pluginmanager.get_plugin("dsession"), "shouldstop", None)
        if session.exitstatus == pytest.ExitCode.INTERRUPTED and (cut_short or stopped_by == DISPATCH_STOPPED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if (
            self.tally.failed_items
            and not cut_short
            and session.exitstatus == pytest.ExitCode.TESTS_FAILED
            and session.testsfailed == self.tally.failed_items
        ):
            session.exitstatus = pytest.ExitCode.OK
        if run is not None and run.dispatch_failure and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # its last rows were lost: not a whole run
        if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and run is not None and run.holds_no_task():
            session.exitstatus = pytest.ExitCode.OK  # nothing of the dataset is this shard's: done

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if (not self.tally.items and self.score is None) or self.put_back:  # a refused run: no section
            return
        from pytest_rollouts.pytest.session import RolloutRun

        run = RolloutRun.get(self.config)
        names = run.artifact_names()
        terminalreporter.section("rollouts")
        if run.holds_no_task():
            index, count = run.settings.shard or (0, 0)
            lines = [
                f"none of the dataset's tasks fall to shard {index}/{count}: nothing to run; its empty "
                "artifacts let the merge prove the shards complete"
            ]
        else:
            lines = self.tally.lines()
        if self.score is not None:
            lines += score_lines(self.score, names[1])
            if self.score.metrics_path is not None:
                names.append(run.shown(self.score.metrics_path))
        if self.score is None or self.score.metrics_path is None:
            lines += self.tally.mean_line()
        lines.append("artifacts: " + ", ".join(names))
        if self.stopped:
            lines.append(self.stopped)
        for line in lines:
            terminalreporter.line(line)
        for problem in (run.dispatch_failure, self.score and self.score.metrics_error):
            if problem:
                terminalreporter.line(problem, red=True, bold=True)
        if self.gate is not None:
            terminalreporter.line(self.gate.message, red=True, bold=True)
