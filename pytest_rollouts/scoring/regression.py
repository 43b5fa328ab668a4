"""The non-inferiority gate: the candidate may be worse than the baseline, but provably by less than DELTA.

A gate on the point difference passes a regression hidden in noise and fails an improvement that
happens to dip. The question a release asks is "could the candidate be more than DELTA worse?",
so the gate fails when the lower end of the paired 95% interval of candidate - baseline is below
-DELTA (a one-sided test at 2.5%), and when there is no interval at all (fewer than two tasks
scored in both runs): a regression that cannot be ruled out is not ruled out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the verdict imports this module in every session; the statistics behind it only when compared
    from pytest_rollouts.scoring.paired import Comparison

# Beside the gate's 6, 7 and 9 (gate.py) and the merge's 8: the candidate may be worse than allowed.
EXIT_REGRESSION = 10


@dataclass(frozen=True)
class RegressionGate:
    max_regression: float
    option: str = "--max-regression"

    def measures(self, comparisons: Sequence[Comparison]) -> str:
        """What the gate compared, passed or not, in one line for every group: the number it uses,
        always printed."""
        compared = "; ".join(self._compared(c) for c in comparisons) or "no group has a task in both runs"
        return f"{self.option} {self.max_regression:g}: {compared}"

    def failure(self, comparisons: Sequence[Comparison]) -> str | None:
        """``EVAL FAILED: ...`` naming every group that fails, or None."""
        failed = [c for c in comparisons if c.interval is None or c.interval.low < -self.max_regression]
        if not failed:
            return None
        why = "; ".join(self._compared(c) for c in failed)
        return (
            f"EVAL FAILED: the candidate may be more than {self.max_regression:g} worse than the baseline "
            f"({self.option} {self.max_regression:g}): {why}."
        )

    def _compared(self, comparison: Comparison) -> str:
        if comparison.interval is None:
            return f"{comparison.group}: no interval ({comparison.tasks} tasks scored in both runs, 2 needed)"
        return (
            f"{comparison.group}: lower bound of candidate - baseline {comparison.interval.low:+.4f} "
            f"(difference {comparison.difference:+.4f}, 95% CI over {comparison.tasks} tasks)"
        )
