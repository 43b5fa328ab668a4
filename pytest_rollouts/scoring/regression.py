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

Gating several groups (agents, suites) at once multiplies the chances of a false alarm; with a
correction (``--correction holm|bh``, ``multiplicity.py``) each group's one-sided p-value of "the
candidate is DELTA worse or more" is adjusted over the groups, and a group fails when its adjusted
p-value is above 2.5%. Without one the rule is the interval's, which is the same test unadjusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_rollouts.datatype import datatype
from pytest_rollouts.scoring.multiplicity import NAMES, NONE, adjust

if TYPE_CHECKING:  # the verdict imports this module in every session; the statistics behind it only when compared
    from pytest_rollouts.scoring.intervals import Interval
    from pytest_rollouts.scoring.paired import Comparison

# Beside the gate's 6, 7 and 9 (gate.py) and the merge's 8: the candidate may be worse than allowed.
EXIT_REGRESSION = 10
# The one-sided level of the gate: the lower end of a two-sided 95% interval.
ONE_SIDED_ALPHA = 0.025


@datatype(frozen=True)
class RegressionGate:
    max_regression: float
    option: str = "--max-regression"
    # Judge the tasks both runs scored even while rollouts lack a score (the user's opt-in).
    scored_only: bool = False
    scored_only_option: str = "--gate-scored-only"

    def measures(self, comparisons: Sequence[Comparison], correction: str = NONE) -> str:
        """What the gate compared, passed or not, in one line for every group: the number it uses,
        always printed (with a correction, each group's raw and adjusted p-value too)."""
        adjusted = self.adjusted(comparisons, correction)
        compared = "; ".join(self._compared(c, p, correction) for c, p in zip(comparisons, adjusted, strict=True))
        return f"{self.option} {self.max_regression:g}: {compared or 'no group has a task in both runs'}"

    def failure(self, comparisons: Sequence[Comparison], correction: str = NONE) -> str | None:
        """``EVAL FAILED: ...`` naming every group that fails, or None."""
        adjusted = self.adjusted(comparisons, correction)
        failed = [(c, p) for c, p in zip(comparisons, adjusted, strict=True) if self._fails(c, p, correction)]
        if not failed:
            return None
        why = "; ".join(self._compared(c, p, correction) for c, p in failed)
        return (
            f"EVAL FAILED: the candidate may be more than {self.max_regression:g} worse than the baseline "
            f"({self.option} {self.max_regression:g}): {why}."
        )

    def p_value(self, comparison: Comparison) -> float | None:
        """The one-sided p-value of "the candidate is at least DELTA worse" from the judged t interval
        (Wellek 2010, ch. 2): below 2.5% exactly when the interval's lower end is above -DELTA."""
        from pytest_rollouts.scoring.distributions import t_cdf, t_ppf

        judged = self.judged(comparison)
        if judged is None:
            return None
        df = (comparison.tasks if self._scored(comparison) else comparison.paired) - 1
        centre, half = (judged.low + judged.high) / 2, (judged.high - judged.low) / 2
        margin = centre + self.max_regression
        if half <= 0:  # every task moved alike: no spread, the difference is what it is
            return 0.0 if margin > 0 else 1.0
        return 1.0 - t_cdf(margin / (half / t_ppf(1 - ONE_SIDED_ALPHA, df)), df)

    def adjusted(self, comparisons: Sequence[Comparison], correction: str) -> list[float | None]:
        """Each group's p-value adjusted over the groups by ``correction`` (all None without one)."""
        if correction == NONE:
            return [None] * len(comparisons)
        return adjust([self.p_value(c) for c in comparisons], correction)

    def _fails(self, comparison: Comparison, adjusted: float | None, correction: str) -> bool:
        judged = self.judged(comparison)
        if judged is None:
            return True
        if correction == NONE:
            return judged.low < -self.max_regression
        return adjusted is None or not adjusted <= ONE_SIDED_ALPHA

    def judged(self, comparison: Comparison) -> Interval | None:
        """The interval the gate judges: the scored tasks' when every paired rollout has a score (or
        the user opts in), else the pessimistic one."""
        return comparison.interval if self._scored(comparison) else comparison.pessimistic

    def _scored(self, comparison: Comparison) -> bool:
        return self.scored_only or not comparison.incomplete

    def _compared(self, comparison: Comparison, adjusted: float | None = None, correction: str = NONE) -> str:
        said = self._interval_words(comparison)
        if correction == NONE or adjusted is None:
            return said
        raw = self.p_value(comparison)
        return f"{said}; p={raw:.4f} that it is {self.max_regression:g} worse, {NAMES[correction]} {adjusted:.4f}"

    def _interval_words(self, comparison: Comparison) -> str:
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
