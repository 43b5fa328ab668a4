"""The CI gate: turn a scored run into an exit status, with codes distinct from pytest's own.

pytest uses 0-5; a CI script can tell "the eval is incomplete" (6) and "the score is too
low" (7) apart from "tests failed" (1) without parsing output.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_rollouts.scoring.accounting import Coverage

EXIT_INCOMPLETE = 6
EXIT_FAIL_UNDER = 7


@dataclass(frozen=True)
class GateFailure:
    exit_code: int
    message: str


def check_gate(
    coverage: Coverage,
    mean_reward: float | None,
    *,
    out: str,
    require_complete: bool,
    fail_under: float | None,
    fail_under_option: str = "--rollouts-fail-under",
) -> GateFailure | None:
    """``require_complete`` first: a partial run's score is not worth comparing to a threshold.

    ``fail_under_option``: the threshold's name where it was given (the merge calls it ``--fail-under``).
    """
    if require_complete and coverage.completed < coverage.expected:
        return GateFailure(
            EXIT_INCOMPLETE,
            f"EVAL FAILED: {coverage.completed}/{coverage.expected} samples completed. "
            f"Partial artifacts retained at {out}.",
        )
    if fail_under is None:
        return None
    if mean_reward is None:
        why = "no mean/reward in the metrics to compare with"
    elif mean_reward < fail_under:
        why = f"mean reward {mean_reward:.4f} is below"
    else:
        return None
    return GateFailure(EXIT_FAIL_UNDER, f"EVAL FAILED: {why} {fail_under_option} {fail_under:g}.")
