"""The non-inferiority gate: the candidate may be worse than the baseline, but provably by less than DELTA.

A gate on the point difference passes a regression hidden in noise and fails an improvement that
happens to dip. The question a release asks is "could the candidate be more than DELTA worse?",
so the gate fails when the lower end of the paired 95% interval of candidate - baseline is below
-DELTA (a one-sided test at 2.5%), and when there is no interval at all (fewer than two tasks
scored in both runs): a regression that cannot be ruled out is not ruled out.

The same holds for rollouts without a score. A candidate that failed 37 of 40 tasks, compared on
the 3 it scored, would pass: so while any paired task has a rollout without a score (in either
run), the gate judges the pessimistic interval, each such rollout at its worst for the candidate
(``Comparison.pessimistic``), unless the user asks for the scored tasks alone
(``--gate-scored-only``). This is the one place the gate is decided, for ``compare``, a run's
``--rollouts-baseline`` and ``aggregate`` alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the verdict imports this module in every session; the statistics behind it only when compared
    from pytest_rollouts.scoring.intervals import Interval
    from pytest_rollouts.scoring.paired import Comparison

# Beside the gate's 6, 7 and 9 (gate.py) and the merge's 8: the candidate may be worse than allowed.
EXIT_REGRESSION = 10


@dataclass(frozen=True)
class RegressionGate:
    max_regression: float
    option: str = "--max-regression"
    # Judge the tasks both runs scored even while rollouts lack a score (the user's opt-in).
    scored_only: bool = False
    scored_only_option: str = "--gate-scored-only"

    def measures(self, comparisons: Sequence[Comparison]) -> str:
        """What the gate compared, passed or not, in one line for every group: the number it uses,
        always printed."""
        compared = "; ".join(self._compared(c) for c in comparisons) or "no group has a task in both runs"
        return f"{self.option} {self.max_regression:g}: {compared}"

    def failure(self, comparisons: Sequence[Comparison]) -> str | None:
        """``EVAL FAILED: ...`` naming every group that fails, or None."""
        failed = [c for c in comparisons if (judged := self.judged(c)) is None or judged.low < -self.max_regression]
        if not failed:
            return None
        why = "; ".join(self._compared(c) for c in failed)
        return (
            f"EVAL FAILED: the candidate may be more than {self.max_regression:g} worse than the baseline "
            f"({self.option} {self.max_regression:g}): {why}."
        )

    def judged(self, comparison: Comparison) -> Interval | None:
        """The interval the gate judges: the scored tasks' when every paired rollout has a score (or
        the user opts in), else the pessimistic one."""
        return comparison.interval if self._scored(comparison) else comparison.pessimistic

    def _scored(self, comparison: Comparison) -> bool:
        return self.scored_only or not comparison.incomplete

    def _compared(self, comparison: Comparison) -> str:
        c = comparison
        judged = self.judged(c)
        if self._scored(c):
            if judged is None:
                return f"{c.group}: no interval ({c.tasks} tasks scored in both runs, 2 needed)"
            left_out = f"; {self.scored_only_option}: {c.incomplete} tasks lack scores" if c.incomplete else ""
            return (
                f"{c.group}: lower bound of candidate - baseline {judged.low:+.4f} "
                f"(difference {c.difference:+.4f}, 95% CI over {c.tasks} tasks{left_out})"
            )
        unscored = (
            f"{c.incomplete} of {c.paired} paired tasks have rollouts without a score; "
            f"{self.scored_only_option} judges the {c.tasks} tasks both runs scored"
        )
        if judged is None:
            why = "rewards outside the reward range" if c.outside is not None else f"{c.paired} paired tasks, 2 needed"
            return f"{c.group}: no pessimistic interval ({why}; {unscored})"
        return (
            f"{c.group}: lower bound of candidate - baseline {judged.low:+.4f} with every rollout without a score "
            f"at its worst for the candidate (95% CI over {c.paired} tasks; {unscored})"
        )
