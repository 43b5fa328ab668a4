"""The live status file (``lifecycle/status.py``) in a pytest session, one writer per run.

In one process its counts are the dispatcher process's reports. Under ``-n`` only the controller
writes: each worker adds its dispatcher's counts to an item's report (a ``rollouts_status``
property, at most once per ``--rollouts-status-interval``), the one channel that already goes from
worker to controller while the run goes, and the controller sums the latest of each worker's. The
final write, after the session's end, says how the run ended.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Generator
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.lifecycle.status import Counts, StatusWriter, concurrency_limit
from pytest_rollouts.pytest.role import SINGLE, role
from pytest_rollouts.pytest.stash import ENDING_KEY, RUN_KEY
from pytest_rollouts.rows.records import NO_REWARD
from pytest_rollouts.store.status import FAILED, FINISHED, STOPPED

if TYPE_CHECKING:
    from pytest_rollouts.pytest.session import RolloutRun

# The report property a worker's counts travel in: [total, done, failed by class, in flight,
# the oldest request's age, task and rollout (or None), each agent's adaptive limit].
STATUS = "rollouts_status"


class SessionStatus:
    """Registered with a session's run (``RolloutRun``); it writes only where the run is dispatched and owned."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.writer: StatusWriter | None = None
        # On a controller: each worker's latest counts, replaced whole as its reports come.
        self._workers: dict[Any, Counts] = {}
        # On a worker: when it last added its counts to a report.
        self._told_at = 0.0
        self._cut_short = False
        this = role(config)
        if this.name != SINGLE:  # one process reads its own dispatcher: no report carries anything
            relay = _Relay(self._tell if this.worker else self._hear)
            config.pluginmanager.register(relay, "rollouts-status-relay")

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """Inside the plugin's wrapper, so once dispatch started (and before any item runs). A
        controller starts at its workers' first counts: a run they refused leaves no file."""
        run = self.config.stash.get(RUN_KEY, None)
        if run is not None and role(self.config).name == SINGLE and run.dispatched:
            self._start(run, partial(_from_dispatcher, run))
        return (yield)

    def _start(self, run: RolloutRun, source: Callable[[], Counts | None]) -> None:
        settings = run.settings
        limit = partial(concurrency_limit, settings)
        writer = StatusWriter(run.paths.out, settings.status_interval, limit, source, total=run.planned)
        self.writer = writer.start()

    def _tell(self, report: pytest.TestReport) -> None:
        run = self.config.stash.get(RUN_KEY, None)
        now = time.monotonic()
        if run is None or now - self._told_at < run.settings.status_interval:
            return
        counts = _from_dispatcher(run)
        if counts is not None:
            self._told_at = now
            oldest = list(counts.oldest) if counts.oldest else None
            said = [counts.total, counts.done, counts.failed, counts.in_flight, oldest, counts.limits]
            report.user_properties.append((STATUS, said))

    def _hear(self, report: pytest.TestReport) -> None:
        said = next((value for name, value in report.user_properties if name == STATUS), None)
        if said is None:
            return
        report.user_properties[:] = [(name, value) for name, value in report.user_properties if name != STATUS]
        total, done, failed, in_flight, oldest, limits = said
        self._workers[getattr(report, "node", None)] = Counts(
            total, done, failed, in_flight, None if oldest is None else tuple(oldest), limits=limits
        )
        run = self.config.stash.get(RUN_KEY, None)
        if self.writer is None and run is not None:
            self._start(run, self._from_workers)

    def _from_workers(self) -> Counts | None:
        """The workers' latest counts summed (each agent's limits too: each worker has its own
        dispatcher): the oldest request is the oldest of theirs."""
        said = list(self._workers.values())
        if not said:
            return None
        now = time.monotonic()
        failed: Counter[str] = Counter()
        limits: Counter[str] = Counter()
        for counts in said:
            failed.update(counts.failed)
            limits.update(counts.limits)
        oldest = [(c.oldest[0] + now - c.at, c.oldest[1], c.oldest[2]) for c in said if c.oldest is not None]
        return Counts(
            max(c.total for c in said),
            sum(c.done for c in said),
            dict(failed),
            sum(c.in_flight for c in said),
            max(oldest, default=None),
            now,
            dict(limits),
        )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A session cut short (``-x``, ``--maxfail``) stopped with rollouts unsent."""
        self._cut_short = bool(session.shouldstop or session.shouldfail)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The last write, once the session's end decided how the run ended."""
        writer, self.writer = self.writer, None
        run = config.stash.get(RUN_KEY, None)
        if writer is None or run is None:
            return
        ending = config.stash.get(ENDING_KEY, None)
        if run.dispatch_failure:
            state = FAILED
        elif ending is None or ending.verdict.stopped or self._cut_short:
            state = STOPPED
        else:
            state = FINISHED
        writer.stop(state, self._final(run, writer.last))
        if ending is not None and ending.put_back:  # stopped before its first request: the place as it was
            writer.path.unlink(missing_ok=True)

    def _final(self, run: RolloutRun, last: Counts) -> Counts:
        """Every rollout this session sent (the dispatchers' last word) and the failures its items
        reported, which the live counts may not have caught up with."""
        sent = run.workers.sent if role(self.config).controller else run.sent
        tally = self.config.pluginmanager.get_plugin("rollouts-reporter").tally
        failed = (tally.counts.failed_by_class + Counter({NO_REWARD: tally.counts.unrewarded})) | Counter(last.failed)
        return Counts(last.total, max(last.done, sent or 0), dict(+failed))


class _Relay:
    """Under ``-n`` only: a worker adds its counts to a call report before xdist sends it, the
    controller takes them out (``on_report``: the one side this process is)."""

    def __init__(self, on_report: Callable[[pytest.TestReport], None]) -> None:
        self._on_report = on_report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.user_properties:
            self._on_report(report)


def _from_dispatcher(run: RolloutRun) -> Counts | None:
    """This process's dispatcher's last report; None before its first and after it closed."""
    in_flight, finished = run.live()
    if finished is None or in_flight is None:
        return None
    count, age, where = in_flight
    oldest = None if age is None or where is None else (age, where[0], where[1])
    return Counts(run.planned, finished[1], finished[2], count, oldest, limits=run.live_limits())
