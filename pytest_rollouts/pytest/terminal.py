"""What pytest shows about rollouts: per-item status words, progress, and the closing summary.

Everything here is read from test reports (``user_properties``, tallied by ``pytest/tally.py``),
which travel from xdist workers to the controller, so the same code serves one process or many.
It only renders and sets nothing: what the run's end means (its score, its exit status) is decided
in ``pytest/finish.py``, and the session's end (``plugin.py``) stashes it for the summary here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Generator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.pytest.role import role
from pytest_rollouts.pytest.stash import ENDING_KEY, NOTICES_KEY, RUN_KEY

if TYPE_CHECKING:
    from pytest_rollouts.pytest.progress import Progress
    from pytest_rollouts.pytest.tally import Tally


class RolloutReporter:
    """Registered in every session; it stays silent until a rollout item reports.

    It shows each item's status word, progress while the run goes, and at the session's end
    (``pytest/finish.py`` scores and judges the run there) the ``rollouts`` section. What it keeps
    of rollouts (tally, progress, status words) is made when the session first shows one (a run
    configured or collected, a worker's dataset, a report with properties): a session without
    datasets imports none of it.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started_at = time.perf_counter()
        self._tally: Tally | None = None
        self._progress: Progress | None = None
        self._words: ModuleType | None = None
        # Without -v, a session of rollout items only shows no letter per item: its progress
        # lines say more, and at 100k items a log of dots says nothing. On a terminal the
        # status line is redrawn in place (live); in a log it is a line every 10% or 5 minutes.
        self.quiet = False
        self.live = False
        # The dataset pytest had named when the last progress line was written in a log.
        self.progress_after: object = None

    @property
    def met(self) -> bool:
        """Whether this session has shown a rollout (or a run) to the reporter."""
        return self._tally is not None

    @property
    def tally(self) -> Tally:
        """What this session's rollout items reported."""
        if self._tally is None:
            self._meet()
        return self._tally

    @property
    def progress(self) -> Progress:
        if self._progress is None:
            self._meet()
        return self._progress

    def _meet(self) -> None:
        """The session shows its first rollout: what the reporter keeps of them, imported now."""
        from pytest_rollouts.pytest import words
        from pytest_rollouts.pytest.progress import Progress
        from pytest_rollouts.pytest.tally import Tally

        self._words = words
        self._progress = Progress(tty=sys.stdout.isatty())
        self._tally = Tally(started_at=self.started_at)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """What was told while pytest configured, under the session's header."""
        notices = self.config.stash.get(NOTICES_KEY, [])
        if notices:
            from pytest_rollouts.pytest.progress import tell

            for notice in notices:
                tell(self.config, notice)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The rollout items that will run: after every deselection, --lf's wrapper included."""
        if RUN_KEY not in session.config.stash:  # no dataset, no rollouts option: spare the import
            return
        from pytest_rollouts.pytest.items import RolloutItem

        self.progress.total = sum(isinstance(item, RolloutItem) for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller has only node ids: a rollout item's is its dataset's, a ``.jsonl`` file."""
        total = sum(nodeid.split("::", 1)[0].endswith(".jsonl") for nodeid in ids)
        if total or self.met:
            self.progress.total = total
        run = self.config.stash.get(RUN_KEY, None)
        if run is not None:
            run.workers.collected += 1

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
        self.started_at = time.perf_counter()
        if self._tally is not None:
            self._tally.started_at = self.started_at
        run = self.config.stash.get(RUN_KEY, None)
        if run is None:
            return
        self.quiet = run.lean and self.config.get_verbosity() <= 0
        self.live = self.quiet and self.progress.tty
        if self.live:
            self.progress.tty_every_s = run.settings.progress_interval
        run.on_heartbeat = self._heartbeat

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        """A rollout's status, ahead of pytest's subtests plugin (``tryfirst`` too, registered
        before this one), which has nothing to say of a rollout and costs every report a lookup.
        Ahead, too, of any plugin or conftest registered later without ``tryfirst``: a rollout
        report's status is this plugin's to give."""
        if not getattr(report, "user_properties", None):
            return None
        if self._words is None:
            self._meet()
        words = self._words
        if self.quiet and report.when == "call" and (report.passed or report.skipped):
            return words.QUIET_PASSED if report.passed else words.QUIET_SKIPPED
        status = words.teststatus(report)
        if status is not None and self.quiet:
            return status[0], "", status[2]
        return status

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.user_properties and report.when == "call":
            tally, progress = self.tally, self.progress
            tally.add(report)
            if self.live and tally.items == progress.total:
                self._show_progress(final=True)
            elif progress.due(tally.items):
                self._show_progress()
            if report.passed and not self.config.option.xmlpath:
                self._words.slim(report)
            elif report.skipped and isinstance(report.longrepr, tuple) and _is_rollout(report):
                # pytest names where the skip was raised (in this plugin); the place to look is the dataset.
                where = str(self.config.rootpath / report.location[0])
                report.longrepr = (where, None, report.longrepr[2])

    def _heartbeat(self) -> None:
        """The engine reports what is in flight with its results and every --rollouts-progress-interval
        while pytest waits: progress stays live when no item finishes.

        Not with -v: pytest has half-written the item's line, which a progress line would split.
        """
        if (self.live or self.config.get_verbosity() <= 0) and self.progress.due(self.tally.items):
            self._show_progress()

    def _show_progress(self, *, final: bool = False) -> None:
        from pytest_rollouts.pytest.progress import fit, live_redraw, own_line, terminal_width

        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            return
        run = self.config.stash.get(RUN_KEY, None)
        line = "" if final else self.progress.line(self.tally, *(run.live() if run else (None, None)))
        if line is None:
            return
        if self.progress.tty:  # whole lines too (-v, an xdist controller): a wrapped one is two rows
            line = fit(line, terminal_width(terminal))
        if self.live:
            # Straight to the terminal, after the file name pytest put at the start of the line,
            # so pytest's idea of the line is unchanged. The last redraw leaves only that name,
            # for pytest's [100%]; the summary section then has the final numbers.
            sys.stdout.write(live_redraw(terminal, line))
            sys.stdout.flush()
            return
        if self.quiet:
            # Whole lines below the dataset's name, which pytest (unlike after write_line) then
            # does not write again: the line is only open when pytest has just named a dataset.
            named = terminal.currentfspath is not None and terminal.currentfspath != self.progress_after
            terminal.write(("\n" if named else "") + line + "\n", flush=True)
            self.progress_after = terminal.currentfspath
            return
        own_line(terminal, line)

    def say(self, line: str) -> None:
        """A line of its own, at once."""
        from pytest_rollouts.pytest.progress import own_line

        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            own_line(terminal, line)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        ending = self.config.stash.get(ENDING_KEY, None)
        if ending is None:  # the session never ended (pytest stopped before it began)
            return
        score, verdict = ending.score, ending.verdict
        if (not self.tally.items and score is None) or ending.put_back:  # a refused run: no section
            return
        from pytest_rollouts.pytest.session import RolloutRun
        from pytest_rollouts.rows.schema import CANCELLED

        run = RolloutRun.get(self.config)
        names = [run.shown(p) for p in (run.paths.out, run.paths.failures, run.paths.materialized)]
        terminalreporter.section("rollouts")
        settings = run.settings
        as_zero = settings.count_as_zero | ({CANCELLED} if settings.count_missing_as_zero else set())
        if run.holds_no_task():
            index, count = run.settings.shard or (0, 0)
            lines = [
                f"none of the dataset's tasks fall to shard {index}/{count}: nothing to run; its empty "
                "artifacts let the merge prove the shards complete"
            ]
        else:
            sent = run.workers.sent if role(self.config).controller else run.sent
            outcomes = score.coverage.outcomes() if score is not None else None
            lines = self.tally.lines(outcomes, sent, as_zero, stopped=bool(verdict.stopped))
        if score is not None:
            from pytest_rollouts.scoring.summary import score_lines

            # No metrics (a stopped run, --rollouts-no-aggregate): no 'Metrics cover' line either.
            metrics = not (verdict.stopped or settings.no_aggregate)
            lines += score_lines(score, names[1], out=names[0], count_as_zero=settings.count_as_zero, scored=metrics)
            if score.metrics_path is not None:
                names.append(run.shown(score.metrics_path))
        if score is not None and settings.no_aggregate and not verdict.stopped:
            lines += self.tally.mean_line(as_zero)
        lines += run.run_dispatch_record().summary_lines()
        unmatched = run.numbering.unmatched or run.workers.unmatched
        if unmatched:
            lines.append(unmatched)
        lines.append("artifacts: " + ", ".join(names))
        if verdict.stopped:
            lines.append(verdict.stopped)
        lines += verdict.measures
        for line in lines:
            terminalreporter.line(line)
        for problem in verdict.problems:
            terminalreporter.line(problem, red=True, bold=True)


def _is_rollout(report: pytest.TestReport) -> bool:
    from pytest_rollouts.pytest.properties import rollout_properties

    return rollout_properties(report) is not None
