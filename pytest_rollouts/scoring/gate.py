"""The CI gate: what a scored run must reach to pass, with exit codes distinct from pytest's own.

pytest uses 0-5; a CI script can tell "the eval is incomplete" (6) and "the score is too
low" (7) apart from "tests failed" (1) without parsing output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_rollouts.config.settings import Settings
    from pytest_rollouts.scoring.accounting import Coverage

EXIT_INCOMPLETE = 6
EXIT_FAIL_UNDER = 7


@dataclass(frozen=True)
class GateFailure:
    exit_code: int
    message: str


@dataclass(frozen=True)
class Gate:
    """What a scored run must reach, and the names its messages give the output and the threshold.

    The default asks nothing: every score passes.
    """

    require_complete: bool = False
    fail_under: float | None = None
    # The output, where an incomplete run's message says its partial artifacts stay.
    out: str = ""
    # The threshold's name where it was given (the merge calls it ``--fail-under``).
    fail_under_option: str = "--rollouts-fail-under"

    @classmethod
    def of(cls, settings: Settings) -> Gate:
        """A run's gate, as its settings ask it."""
        return cls(settings.require_complete, settings.fail_under, str(settings.out), settings.source_of("fail_under"))

    def check(self, coverage: Coverage, mean_reward: float | None) -> GateFailure | None:
        """``require_complete`` first: a partial run's score is not worth comparing to a threshold."""
        if self.require_complete and coverage.completed < coverage.expected:
            return GateFailure(
                EXIT_INCOMPLETE,
                f"EVAL FAILED: {coverage.completed}/{coverage.expected} samples completed. "
                f"Partial artifacts retained at {self.out}.",
            )
        if self.fail_under is None:
            return None
        if mean_reward is None:
            why = "no mean/reward in the metrics to compare with"
        elif mean_reward < self.fail_under:
            why = f"mean reward {mean_reward:.4f} is below"
        else:
            return None
        return GateFailure(EXIT_FAIL_UNDER, f"EVAL FAILED: {why} {self.fail_under_option} {self.fail_under:g}.")
