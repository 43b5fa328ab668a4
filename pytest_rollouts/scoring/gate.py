"""The CI gate: what a scored run must reach to pass, with exit codes distinct from pytest's own.

pytest uses 0-5; a CI script can tell "the eval is incomplete" (6), "the score is too low" (7)
and "too many rollouts failed" (9) apart from "tests failed" (1) without parsing output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.records import NO_REWARD

if TYPE_CHECKING:
    from pytest_rollouts.config.settings import Settings
    from pytest_rollouts.config.values import FailureLimit
    from pytest_rollouts.scoring.accounting import Coverage

EXIT_INCOMPLETE = 6
EXIT_FAIL_UNDER = 7
# 8 is the aggregate command's (its inputs do not form one run).
EXIT_TOO_MANY_FAILURES = 9


@datatype
class GateFailure:
    """A gate the run did not pass: the exit status it asks for, and why."""

    exit_code: int
    message: str


@datatype(frozen=True)
class Gate:
    """What a scored run must reach, and the names its messages give the output and the options.

    The default asks only that some rollout produced a reward: a run that produced nothing (a dead
    agent with health checks off, an agent that never sends a reward) is no success.
    """

    require_complete: bool = False
    fail_under: float | None = None
    # The output, where an incomplete run's message says its partial artifacts stay.
    out: str = ""
    # The threshold's name where it was given (the merge calls it ``--fail-under``).
    fail_under_option: str = "--rollouts-fail-under"
    max_failures: FailureLimit | None = None
    max_failures_option: str = "--rollouts-max-failures"
    # What the threshold compares (--rollouts-gate-on): the mean, or its Manski lower bound.
    gate_on: str = "mean"

    @classmethod
    def of(cls, settings: Settings) -> Gate:
        """A run's gate, as its settings ask it."""
        return cls(
            settings.require_complete,
            settings.fail_under,
            str(settings.out),
            settings.source_of("fail_under"),
            settings.max_failures,
            settings.source_of("max_failures"),
            gate_on=settings.gate_on,
        )

    def check(self, coverage: Coverage, mean_reward: float | None, *, passing: bool = True) -> GateFailure | None:
        """``require_complete`` first, then the failures: a partial or broken run's score is not worth
        comparing to a threshold.

        ``passing``: the run would pass but for the gate. The default rule (no reward at all) only
        keeps such a run from exiting 0: one that failed already (-x, a stopped dispatch, a failed
        test) keeps its own status and reason.
        """
        if self.require_complete and coverage.completed < coverage.expected:
            return GateFailure(
                EXIT_INCOMPLETE,
                f"EVAL FAILED: {coverage.completed}/{coverage.expected} samples completed. "
                f"Partial artifacts retained at {self.out}.",
            )
        failures = self._failures(coverage, passing)
        if failures is not None:
            return GateFailure(EXIT_TOO_MANY_FAILURES, f"EVAL FAILED: {failures}.")
        if self.fail_under is None:
            return None
        if mean_reward is None:
            why = "no mean/reward in the metrics to compare with"
        elif mean_reward < self.fail_under:
            why = f"{self.compared} {mean_reward:.4f} is below"
        else:
            return None
        return GateFailure(EXIT_FAIL_UNDER, f"EVAL FAILED: {why} {self.fail_under_option} {self.fail_under:g}.")

    def measures(self, coverage: Coverage, mean_reward: float | None) -> list[str]:
        """The numbers the asked gates compare, whether they pass or not: a passing gate shows its
        margin, and a CI log says what was compared without a second look at the metrics."""
        lines = []
        if self.max_failures is not None:
            lines.append(f"{self.max_failures_option} {self.max_failures}: {_failed(coverage)}")
        if self.fail_under is not None:
            mean = f"no {self.compared}" if mean_reward is None else f"{self.compared} {mean_reward:.4f}"
            # The bound counts every rollout but the masked ones: the unknown ones at the floor.
            over = coverage.scored if self.gate_on == "mean" else coverage.expected - coverage.masked
            lines.append(f"{self.fail_under_option} {self.fail_under:g}: {mean} over {over} rollouts")
        return lines

    @property
    def compared(self) -> str:
        """The number the threshold is compared with, as the lines name it."""
        return "mean reward" if self.gate_on == "mean" else "Manski lower bound of the mean reward"

    def _failures(self, coverage: Coverage, passing: bool) -> str | None:
        """Why the run failed on its failures, or None."""
        if passing and coverage.expected and not coverage.rewarded:
            return f"no rollout produced a reward ({coverage.outcomes().line()})"
        if self.max_failures is not None and not self.max_failures.allows(coverage.failed, coverage.expected):
            return f"{_failed(coverage)}, more than {self.max_failures_option} {self.max_failures} allows"
        return None


def _failed(coverage: Coverage) -> str:
    """``3 of 10 rollouts failed (agent_run_error 2, no_reward 1)``."""
    classes = sorted({**coverage.failed_by_class, NO_REWARD: coverage.unrewarded}.items())
    by_class = ", ".join(f"{name} {count}" for name, count in classes if count)
    return f"{coverage.failed} of {coverage.expected} rollouts failed" + (f" ({by_class})" if by_class else "")
