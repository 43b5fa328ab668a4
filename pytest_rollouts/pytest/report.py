"""What pytest shows about rollouts: per-item status words, progress, and the closing summary.

Everything here is read from test reports (``user_properties``), which travel from
xdist workers to the controller, so the same code serves one process or many. It only shows:
what the run's end means (its score, its exit status) is decided in ``pytest/finish.py``.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.pytest.progress import Progress, fit, live_redraw, own_line, rate, tell, terminal_width
from pytest_rollouts.pytest.properties import (
    CACHED,
    DRAINED,
    ELAPSED,
    FAILURES,
    GIVEN_UP,
    MASKED,
    NO_REWARD,
    OMITTED,
    REWARDS,
    rollout_properties,
)
from pytest_rollouts.pytest.role import role
from pytest_rollouts.pytest.stash import NOTICES_KEY, RUN_KEY
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.rows.records import NO_REWARD as NO_REWARD_STATUS
from pytest_rollouts.rows.records import dominant_class
from pytest_rollouts.rows.schema import CANCELLED

if TYPE_CHECKING:  # this module is imported in every pytest session: scoring only once a run ends
    from pytest_rollouts.pytest.finish import Ending
    from pytest_rollouts.scoring.accounting import Outcomes

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
    """Failed rollouts report under their class, so the summary reads ``3 agent_run_error``; results
    without a reward under ``no_reward``."""
    props = rollout_properties(report)
    if props is None:
        return None
    unscored = _unscored(props)
    if report.failed and unscored:
        category = dominant_class(unscored)
        if category in PYTEST_CATEGORIES:
            category = "rollout_" + category
        return category, "F", category.upper()
    if report.passed:
        rewards = " ".join(_fmt(r) for r in props.get(REWARDS, ()))
        masked = f"; {props[MASKED]} masked" if MASKED in props else ""
        cached = f"; {props[CACHED]} cached" if CACHED in props else ""
        return "passed", ".", f"PASSED (reward {rewards}{masked}{cached})"
    return None


def _unscored(props: Mapping[str, Any]) -> dict[str, int]:
    """An item's rollouts that fail it, by class: its failures, and its results without a reward."""
    return {**props.get(FAILURES, {}), **({NO_REWARD_STATUS: props[NO_REWARD]} if NO_REWARD in props else {})}


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
    masked: int = 0
    unrewarded: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    failed_items: int = 0
    examples: list[str] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    drained: set[tuple[int, int]] = field(default_factory=set)
    given_up: int = 0
    omitted: int = 0

    def add(self, report: pytest.TestReport) -> None:
        props = rollout_properties(report)
        if props is None:
            return
        self.items += 1
        self.last_at = time.perf_counter()
        for reward in props.get(REWARDS, ()):
            if reward is not None:  # None: a failure, a masked result or one without a reward
                self.reward_sum += reward
                self.rewarded += 1
        self.masked += props.get(MASKED, 0)
        self.unrewarded += props.get(NO_REWARD, 0)
        elapsed = props.get(ELAPSED, ())
        if elapsed and not self.durations:
            # Dispatch began no later than the first reported rollout's start: on an xdist
            # controller the loop starts a worker start-up earlier, which is not dispatch time.
            self.started_at = max(self.started_at, self.last_at - max(elapsed))
        self.durations.extend(elapsed)
        # Most items drained and failed nothing: no set or Counter update for them (a Counter's is Python).
        if DRAINED in props:
            self.drained.update((task, rollout) for task, rollout in props[DRAINED])
        if FAILURES in props:
            self.failures.update(props[FAILURES])
        self.given_up += props.get(GIVEN_UP, 0)
        self.omitted += props.get(OMITTED, 0)
        if report.failed and _unscored(props):
            self.failed_items += 1
            if len(self.examples) < SHOWN_FAILURES:
                # A report from an xdist worker starts with the worker's name and Python.
                lines = report.longreprtext.splitlines()
                reason = next((line for line in lines if line.startswith("rollout ")), lines[0] if lines else "")
                self.examples.append(f"{report.nodeid} {reason}")

    def masking(self) -> MaskingCounts:
        """What the reported items lost to masked and dropped rollouts (``rows/masking.py``)."""
        failed = sum(self.failures.values()) - self.omitted
        return MaskingCounts(self.rewarded, self.reward_sum, self.masked, failed, self.omitted)

    def outcomes(self, as_zero: frozenset[str] = frozenset()) -> Outcomes:
        """What this session's items reported, counted as the whole run's coverage counts;
        ``as_zero``: the failure classes the policies score as zero."""
        from pytest_rollouts.scoring.accounting import Outcomes

        total = self.rewarded + self.masked + self.unrewarded + sum(self.failures.values())
        zeros = sum(count for name, count in self.failures.items() if name in as_zero)
        return Outcomes(total, self.rewarded, self.masked, self.unrewarded, self.failures, zeros=zeros)

    def lines(
        self,
        whole_run: Outcomes | None,
        sent: int | None = None,
        as_zero: frozenset[str] = frozenset(),
        stopped: bool = False,
    ) -> list[str]:
        """The session's lines; first what became of the rollouts: of the whole run (from disk) when
        it was scored, and of this session too where its reports cover other rollouts (an xdist run
        stopped while its workers had sent more, a worker lost, ``-k``).

        ``sent``: the rollouts this session's dispatch sent, which a stop (``-x``, Ctrl-C) leaves
        ahead of what its items reported; the latency then says how many it covers. None: not
        known (xdist workers stopped before they said), and the count is then of the reports.
        ``stopped``: the user stopped the run, whose dispatch lasted until then.
        """
        session = self.outcomes(as_zero)
        if whole_run is None:
            lines = [f"this session: {session.line(session=True)}"]
        elif whole_run == session or whole_run.without_rows_missing() == session:
            # The session reported every row there is: the run's line, with those never written, says it all.
            lines = [whole_run.line()]
        else:
            lines = [f"whole run: {whole_run.line()}", f"this session: {session.line(session=True)}"]
        apart = lines[0].startswith(("this session", "whole run"))
        if self.given_up:
            lines.append(
                f"{self.given_up} rollouts used their last attempt and no resume sends them again; to try them again, "
                "resume with a higher --rollouts-max-attempts (env NEMO_GYM_MAX_ROLLOUT_ATTEMPTS)"
            )
        reported = len(self.durations)
        ran = max(sent or 0, reported)
        # Sent beyond the reports, or requests in flight when stopped: the dispatch went on until the session ended.
        end = time.perf_counter() if ran > reported or stopped else self.last_at
        what = f"{ran} rollout{'' if ran == 1 else 's'}" + (" reported this session" if sent is None and apart else "")
        if ran:  # The live line's short rate (``1.9k/s``), not ``7001080 rollouts/hour``.
            lines.append(f"{what} ran in {max(end - self.started_at, 1e-9):.2f}s, {rate(self.per_hour(end, ran))}")
        from pytest_rollouts.scoring.metrics import latency_summary

        latency = latency_summary(self.durations)
        if latency["count"]:
            covers = f"the {reported} reported before the stop" if ran > reported else f"{reported} rollouts"
            shown = "latency p50 {p50:.3f}s, p90 {p90:.3f}s, p99 {p99:.3f}s, max {max:.3f}s".format(**latency)
            lines.append(f"{shown} over {covers}")
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
        from pytest_rollouts.scoring.metrics import perf_summary

        return perf_summary(self.durations, self.last_at - self.started_at)

    def mean_line(self, as_zero: frozenset[str] = frozenset()) -> list[str]:
        """Used only when no metrics were computed (``--rollouts-no-aggregate``): the mean of what
        this session's items reported, masked results left out and failures of the classes
        ``as_zero`` names counted as zeros, as the metrics do."""
        zeros = self.outcomes(as_zero).zeros
        if not self.rewarded + zeros:
            return []
        mean = self.reward_sum / (self.rewarded + zeros)
        counted = f" ({zeros} of them failed and scored as zero)" if zeros else ""
        return [f"mean reward {mean:.4f} over {self.rewarded + zeros} rollouts reported this session{counted}"]


class RolloutReporter:
    """Registered in every session; it stays silent until a rollout item reports.

    It shows each item's status word, progress while the run goes, and at the session's end
    (``pytest/finish.py`` scores and judges the run there) the ``rollouts`` section.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tally = Tally()
        # What the session's end decided; nothing until it ends.
        self.ending: Ending | None = None
        self.progress = Progress(tty=sys.stdout.isatty())
        # Without -v, a session of rollout items only shows no letter per item: its progress
        # lines say more, and at 100k items a log of dots says nothing. On a terminal the
        # status line is redrawn in place (live); in a log it is a line every 10% or 5 minutes.
        self.quiet = False
        self.live = False
        # The dataset pytest had named when the last progress line was written in a log.
        self.progress_after: object = None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """What was told while pytest configured, under the session's header."""
        for notice in self.config.stash.get(NOTICES_KEY, []):
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
        self.progress.total = sum(nodeid.split("::", 1)[0].endswith(".jsonl") for nodeid in ids)
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
        line = "" if final else self.progress.line(self.tally, run and run.in_flight(), run and run.finished())
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

    def _say(self, line: str) -> None:
        """A line of its own, at once."""
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            own_line(terminal, line)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        """Around the other plugins' session ends (inside the terminal reporter's, which prints the
        section after): xdist's controller waits there for its workers to exit, and a stop landing
        then (Ctrl-C, SIGTERM) must still end in the section, not a traceback."""
        try:
            yield
        except KeyboardInterrupt:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        from pytest_rollouts.pytest.finish import end_run

        self.ending = end_run(self.config, session, self.tally, self._say)
        # The run's verdict (scoring/verdict.py) is the session's exit status.
        session.exitstatus = self.ending.verdict.exit_code

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.ending is None:  # the session never ended (pytest stopped before it began)
            return
        score, verdict = self.ending.score, self.ending.verdict
        if (not self.tally.items and score is None) or self.ending.put_back:  # a refused run: no section
            return
        from pytest_rollouts.pytest.session import RolloutRun

        run = RolloutRun.get(self.config)
        names = run.artifact_names()
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
        unmatched = run.planning.unmatched or run.workers.unmatched
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
