"""A comparison that may stop early: an anytime-valid confidence sequence for the paired difference.

A fixed-size test looked at after every task is no longer a 5% test: peeking after each of 200
tasks and stopping at the first p < 0.05 raises a false alarm far more often than one time in
twenty. A confidence sequence is a sequence of intervals that all hold the true mean difference
*at once*, with probability 95%, however many times it is looked at: a comparison (or a running
eval) may stop at the first task after which the interval excludes 0 (or, for the regression
gate, after which its lower end is above -DELTA) and keep its 5% error.

This is the predictable plug-in empirical-Bernstein confidence sequence of Waudby-Smith and Ramdas
(2023, "Estimating means of bounded random variables by betting", JRSSB 86(1), Theorem 2 and
eq. (13)-(15)), for each task's difference d_i = candidate mean - baseline mean, which lies in
[-W, W] with W the width of the reward range, mapped to x_i = (d_i + W) / 2W in [0, 1]:

    mu_t = (1/2 + sum x_i) / (t + 1),   s2_t = (1/4 + sum (x_i - mu_i)^2) / (t + 1)
    lambda_t = min(sqrt(2 log(2/alpha) / (s2_{t-1} t log(1 + t))), 1/2)
    v_t = 4 (x_t - mu_{t-1})^2,  psi(lambda) = (-log(1 - lambda) - lambda) / 4
    C_t = sum lambda_i x_i / sum lambda_i  +/-  (log(2/alpha) + sum v_i psi(lambda_i)) / sum lambda_i

intersected over time (each C_t holds at once, so their running intersection does too). It adapts
to the spread of the differences (most are 0 when two models agree on most tasks), where a
Hoeffding bound would assume the worst. Tasks are taken in the order the eval ran them (task order).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import field

from pytest_rollouts.datatype import datatype

ALPHA = 0.05
# The largest bet, as the paper's experiments take it.
_MAX_LAMBDA = 0.5


@datatype
class ConfidenceSequence:
    """The running confidence sequence of a mean difference in [-width, width]; ``add`` one task's
    difference at a time (a running eval may feed it as tasks finish), read ``low``/``high``."""

    width: float
    alpha: float = ALPHA
    tasks: int = field(default=0, init=False)
    low: float = field(init=False)
    high: float = field(init=False)
    _sum_x: float = field(default=0.0, init=False)
    _sum_sq: float = field(default=0.25, init=False)  # the plug-in variance's prior term, 1/4
    _sum_lambda: float = field(default=0.0, init=False)
    _sum_lambda_x: float = field(default=0.0, init=False)
    _sum_penalty: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not self.width > 0:
            raise ValueError(f"the differences' range must be positive, got {self.width:g}")
        self.low, self.high = -self.width, self.width

    def add(self, difference: float) -> None:
        x = min(1.0, max(0.0, (difference + self.width) / (2 * self.width)))
        t = self.tasks + 1
        mean_before = (0.5 + self._sum_x) / t  # mu_{t-1}
        variance_before = self._sum_sq / t  # s2_{t-1}
        log_term = math.log(2 / self.alpha)
        bet = min(math.sqrt(2 * log_term / (variance_before * t * math.log1p(t))), _MAX_LAMBDA)
        self._sum_lambda += bet
        self._sum_lambda_x += bet * x
        self._sum_penalty += (x - mean_before) ** 2 * (-math.log1p(-bet) - bet)  # v_t psi(lambda_t)
        self._sum_x += x
        self.tasks = t
        self._sum_sq += (x - (0.5 + self._sum_x) / (t + 1)) ** 2
        centre = self._sum_lambda_x / self._sum_lambda
        half = (log_term + self._sum_penalty) / self._sum_lambda
        # Back to the difference's scale, and intersected with every earlier interval.
        self.low = max(self.low, (centre - half) * 2 * self.width - self.width)
        self.high = min(self.high, (centre + half) * 2 * self.width - self.width)

    def excludes(self, value: float = 0.0) -> bool:
        """The sequence has ruled ``value`` out: a running eval may stop here and keep its error rate."""
        return not self.low <= value <= self.high


@datatype
class InTaskOrder:
    """Feeds a confidence sequence the differences of tasks that finish in any order, in task order.

    Results come back in completion order, and that order may depend on the outcome (a failure
    returns sooner than a long success): a sequence fed in it would no longer hold its promise, which
    needs each difference drawn before it is seen. Buffered and released by task index (0, 1, 2, ...),
    the order is fixed before any reward is.
    """

    sequence: ConfidenceSequence
    _waiting: dict[int, float] = field(default_factory=dict, init=False)
    _next: int = field(default=0, init=False)

    def add(self, task: int, difference: float) -> None:
        self._waiting[task] = difference
        while self._next in self._waiting:
            self.sequence.add(self._waiting.pop(self._next))
            self._next += 1


@datatype(frozen=True)
class SequentialResult:
    """The confidence sequence over a comparison's tasks, and when it became clear."""

    tasks: int
    low: float
    high: float
    # The first task count after which the sequence excluded 0 (a difference either way), and after
    # which its lower end was above -max_regression (the gate could pass); None when it never did.
    clear_at: int | None
    gate_clear_at: int | None

    def as_dict(self) -> dict[str, object]:
        return {
            "num_tasks": self.tasks,
            "confidence_sequence_95/difference": [self.low, self.high],
            "clear_at_tasks": self.clear_at,
            "gate_clear_at_tasks": self.gate_clear_at,
        }


def sequential(differences: Sequence[float], width: float, max_regression: float | None = None) -> SequentialResult:
    """Run the sequence over ``differences`` in order, noting when it first excluded 0 and, with a
    gate, when its lower end first rose above -``max_regression``."""
    sequence = ConfidenceSequence(width)
    clear_at = gate_clear_at = None
    for d in differences:
        sequence.add(d)
        if clear_at is None and sequence.excludes(0.0):
            clear_at = sequence.tasks
        if gate_clear_at is None and max_regression is not None and sequence.low > -max_regression:
            gate_clear_at = sequence.tasks
    return SequentialResult(sequence.tasks, sequence.low, sequence.high, clear_at, gate_clear_at)
