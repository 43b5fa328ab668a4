"""What ``pytest-rollouts compare`` and ``power`` print (at most three lines per group), and the one
line a run's summary gives each group's comparison with ``--rollouts-baseline``.

``compare``'s first line is the answer (the difference, its interval, the test), the second what
could move it (each run's mean, Manski's bounds), the third which tasks changed most. A run's
summary already spends two lines on each group's own score, so its comparison is the same facts
in one line. Numbers are signed where they are differences, so a regression reads as one at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_rollouts.scoring.cost import RolloutCost
from pytest_rollouts.scoring.intervals import RewardRange, outside_words
from pytest_rollouts.scoring.paired import NO_TASK_SCORED_IN_BOTH, Comparison, Flip
from pytest_rollouts.scoring.power import REPEAT_CHOICES, Variance, minimum_detectable, tasks_needed

FLIPS_SHOWN = 5
# A run's one line names fewer: the metrics file lists every flip.
FLIPS_IN_RUN_LINE = 3


def comparison_lines(comparison: Comparison, reward_range: RewardRange) -> list[str]:
    c = comparison
    difference = c.difference
    said = NO_TASK_SCORED_IN_BOTH if difference is None else f"candidate - baseline {difference:+.4f}"
    head = f"{c.group}: {said}"
    if c.interval is not None:
        head += f", 95% CI [{c.interval.low:+.4f}, {c.interval.high:+.4f}] (paired t, {c.tasks} tasks)"
    elif c.tasks:
        head += f" over {c.tasks} task (no interval from one task)"
    if c.test is not None:
        head += f"; {c.test.method} p={c.test.p_value:.4f}"
        if c.test.discordant is not None:
            only_candidate, only_baseline = c.test.discordant  # not the flips below: any change of a task's mean
            head += f" (solved in one run only: {only_candidate} the candidate, {only_baseline} the baseline)"
    means = "" if difference is None else f"baseline {c.baseline_mean:.4f}, candidate {c.candidate_mean:.4f}; "
    no_bounds = _no_bounds(c, reward_range)
    bounds = f"Manski bounds of the difference {_bounds(c)} (unknown rollouts at {reward_range})"
    if no_bounds is not None:
        bounds = f"{no_bounds} (--reward-range)"
    second = f"{c.group}: {means}{bounds}"
    if c.unscored:
        second += f"; {c.unscored} paired tasks unscored in a run"
    lines = [head, second]
    if c.flips:
        fixed = [f for f in c.flips if f.difference > 0]
        broke = [f for f in c.flips if f.difference < 0]
        lines.append(f"{c.group}: changed most: {_flips('fixed', fixed)}; {_flips('broke', broke)}")
    return lines


def comparison_line(comparison: Comparison, reward_range: RewardRange, adjusted: str = "") -> str:
    """``group: vs baseline 0.7000 -> 0.6000: -0.1000, 95% CI [...] (paired t, 40 tasks); mcnemar
    p=...; Manski [...]; fixed 1: ...; broke 5: ...``: a run's summary line for one group
    (``adjusted``: the words of its adjusted p-value, after the test's)."""
    c = comparison
    difference = c.difference
    if difference is None:
        bounds = _no_bounds(c, reward_range) or f"Manski bounds of the difference {_bounds(c)}"
        return f"{c.group}: vs baseline: {NO_TASK_SCORED_IN_BOTH}; {bounds}"
    line = f"{c.group}: vs baseline {c.baseline_mean:.4f} -> {c.candidate_mean:.4f}: {difference:+.4f}"
    if c.interval is not None:
        line += f", 95% CI [{c.interval.low:+.4f}, {c.interval.high:+.4f}] (paired t, {c.tasks} tasks)"
    else:
        line += f" over {c.tasks} task (no interval from one task)"
    if c.test is not None:
        line += f"; {c.test.method} p={c.test.p_value:.4f}"
        if c.test.discordant is not None:
            line += " (solved in one run only: {} the candidate, {} the baseline)".format(*c.test.discordant)
        line += adjusted
    line += f"; {_no_bounds(c, reward_range) or f'Manski {_bounds(c)}'}"
    if c.unscored:
        line += f" ({c.unscored} paired tasks unscored in a run)"
    fixed = [f for f in c.flips if f.difference > 0]
    broke = [f for f in c.flips if f.difference < 0]
    return f"{line}; {_flips('fixed', fixed, FLIPS_IN_RUN_LINE)}; {_flips('broke', broke, FLIPS_IN_RUN_LINE)}"


def _bounds(comparison: Comparison) -> str:
    if comparison.manski is None:
        return "none"
    low, high = comparison.manski
    return f"[{low:+.4f}, {high:+.4f}]"


def _no_bounds(comparison: Comparison, reward_range: RewardRange) -> str | None:
    """Why there are no Manski bounds (rewards outside the range, the run's own rule), or None."""
    if comparison.outside is None:
        return None
    return f"no Manski bounds: {outside_words(comparison.outside, reward_range.low, reward_range.high)}"


def _flips(word: str, flips: Sequence[Flip], shown_at_most: int = FLIPS_SHOWN) -> str:
    if not flips:
        return f"{word} none"
    shown = ", ".join(f"{_label(f.label)} ({f.baseline:.2g}->{f.candidate:.2g})" for f in flips[:shown_at_most])
    more = f" and {len(flips) - shown_at_most} more" if len(flips) > shown_at_most else ""
    return f"{word} {len(flips)}: {shown}{more}"


def _label(label: str) -> str:
    """A task as a list of them names it: an index as it is, an id quoted as Python writes a string,
    so an id holding ``, `` or `` (`` reads as one id (``'a, b'``), and a newline cannot break the line."""
    return label if label.isascii() and label.isdigit() else repr(label)


def power_lines(
    group: str, variance: Variance, delta: float | None, correlation: float, cost: RolloutCost | None = None
) -> list[str]:
    """``power``'s lines for one group: its variance components, the difference it detects, and with
    ``delta`` the tasks (by repeats) that detect it, each with what one run of that size costs by
    ``cost``, the run's own measurements."""
    within = "unknown (one rollout per task)" if variance.within is None else f"{variance.within:.4f}"
    lines = [
        f"{group}: {variance.tasks} tasks x {variance.repeats:g} repeats; between-task variance "
        f"{variance.between:.4f}, within-task {within}",
        f"{group}: minimum detectable difference {minimum_detectable(variance, correlation=correlation):.4f} "
        f"(80% power, 5% level, paired, correlation {correlation:g})",
    ]
    if delta is not None:
        choices = (round(variance.repeats),) if variance.within is None else REPEAT_CHOICES
        for k in choices:
            n = tasks_needed(variance, delta, k, correlation)
            spent = "" if cost is None else f" ({cost.words(n * k)})"
            lines.append(f"{group}: to detect {delta:g}: {n} tasks x {k}{spent}")
    if cost is not None:
        lines.append(f"{group}: {cost.per_rollout()}; a baseline run of the same size costs as much again")
    return lines
