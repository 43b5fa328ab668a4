"""What this session's rollout items reported, tallied from their test reports (which travel from
xdist workers to the controller, so one process or many tally alike): the session's own lines,
the rate and latency, and the numbers the live line shows. Whole-run numbers come from scoring."""

from __future__ import annotations

import time
from array import array
from collections.abc import Mapping, MutableSequence
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.datatype import datatype
from pytest_rollouts.pytest.progress import rate
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
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.rows.records import NO_REWARD as NO_REWARD_STATUS
from pytest_rollouts.scoring.accounting import Coverage

if TYPE_CHECKING:
    from pytest_rollouts.scoring.accounting import Outcomes

SHOWN_FAILURES = 10
# The properties of an item with nothing but results (``properties.record_outcomes``).
_RESULTS_ONLY = frozenset({REWARDS, ELAPSED, CACHED})


def unscored(props: Mapping[str, Any]) -> dict[str, int]:
    """An item's rollouts that fail it, by class: its failures, and its results without a reward."""
    return {**props.get(FAILURES, {}), **({NO_REWARD_STATUS: props[NO_REWARD]} if NO_REWARD in props else {})}


@datatype
class Tally:
    """What this session's rollout items reported, and when the run began."""

    started_at: float = field(default_factory=time.perf_counter)
    last_at: float = 0.0
    items: int = 0
    # What became of the reported rollouts, counted as scoring counts the run's (``completed``:
    # results, masked and without a reward included; ``failed_by_class``: failures by class).
    counts: Coverage = field(default_factory=Coverage)
    reward_sum: float = 0.0
    failed_items: int = 0
    examples: list[str] = field(default_factory=list)
    # Each reported rollout's latency as a raw double: a float object and its pointer were 32 bytes.
    durations: MutableSequence[float] = field(default_factory=lambda: array("d"))
    drained: set[tuple[int, int]] = field(default_factory=set)
    given_up: int = 0
    omitted: int = 0

    def add(self, report: pytest.TestReport) -> None:
        props = rollout_properties(report)
        if props is None:
            return
        self.items += 1
        self.last_at = time.perf_counter()
        counts = self.counts
        for reward in props.get(REWARDS, ()):
            if reward is not None:  # None: a failure, a masked result or one without a reward
                self.reward_sum += reward
                counts.completed += 1
        elapsed = props.get(ELAPSED, ())
        if elapsed and not self.durations:
            # Dispatch began no later than the first reported rollout's start: on an xdist
            # controller the loop starts a worker start-up earlier, which is not dispatch time.
            self.started_at = max(self.started_at, self.last_at - max(elapsed))
        self.durations.extend(elapsed)
        # An item's other counts are among its properties only when not zero, and most items have none.
        if not props.keys() <= _RESULTS_ONLY:
            self._add_counts(props, report)

    def _add_counts(self, props: Mapping[str, Any], report: pytest.TestReport) -> None:
        """What an item's properties say beyond its rewards and latencies: masked, unrewarded,
        drained, failed, given up and omitted rollouts, and the failure's example line."""
        counts = self.counts
        masked, unrewarded = props.get(MASKED, 0), props.get(NO_REWARD, 0)
        counts.completed += masked + unrewarded
        counts.masked += masked
        counts.unrewarded += unrewarded
        # No set or Counter update for an item that drained and failed nothing (a Counter's is Python).
        if DRAINED in props:
            self.drained.update((task, rollout) for task, rollout in props[DRAINED])
        if FAILURES in props:
            counts.failed_by_class.update(props[FAILURES])
        self.given_up += props.get(GIVEN_UP, 0)
        self.omitted += props.get(OMITTED, 0)
        if report.failed and unscored(props):
            self.failed_items += 1
            if len(self.examples) < SHOWN_FAILURES:
                # A report from an xdist worker starts with the worker's name and Python.
                lines = report.longreprtext.splitlines()
                reason = next((line for line in lines if line.startswith("rollout ")), lines[0] if lines else "")
                self.examples.append(f"{report.nodeid} {reason}")

    def masking(self) -> MaskingCounts:
        """What the reported items lost to masked and dropped rollouts (``rows/masking.py``)."""
        counts = self.counts
        failed = sum(counts.failed_by_class.values()) - self.omitted
        return MaskingCounts(counts.rewarded, self.reward_sum, counts.masked, failed, self.omitted)

    def outcomes(self, as_zero: frozenset[str] = frozenset()) -> Outcomes:
        """What this session's items reported, counted as the whole run's coverage counts;
        ``as_zero``: the failure classes the policies score as zero."""
        counts = self.counts
        failed = counts.failed_by_class
        zeros = sum(count for name, count in failed.items() if name in as_zero)
        # Every reported rollout left a row or a failure: none is missing from what was reported.
        return replace(counts, expected=counts.completed + sum(failed.values()), counted_as_zero=zeros).outcomes()

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
        from pytest_rollouts.scoring.perf import latency_summary

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
        from pytest_rollouts.scoring.perf import perf_summary

        return perf_summary(self.durations, self.last_at - self.started_at)

    def mean_line(self, as_zero: frozenset[str] = frozenset()) -> list[str]:
        """Used only when no metrics were computed (``--rollouts-no-aggregate``): the mean of what
        this session's items reported, masked results left out and failures of the classes
        ``as_zero`` names counted as zeros, as the metrics do."""
        outcomes = self.outcomes(as_zero)
        zeros, scored = outcomes.zeros, outcomes.scored + outcomes.zeros
        if not scored:
            return []
        counted = f" ({zeros} of them failed and scored as zero)" if zeros else ""
        return [f"mean reward {self.reward_sum / scored:.4f} over {scored} rollouts reported this session{counted}"]
