"""A score as text: the lines a run's section and the aggregate CLI print, read from the score alone."""

from __future__ import annotations

import difflib
import math
from typing import TYPE_CHECKING, Any

from pytest_rollouts.rows.resume import RETRYABLE_WITH_OPT_IN
from pytest_rollouts.rows.schema import (
    AGENT_REQUEST_FAILED,
    AGENT_RUN_ERROR,
    ALWAYS_TERMINAL,
    CACHE_HITS,
    CACHE_MISSES,
    CANCELLED,
    ENVIRONMENT_SERVER_FAILED,
    JUDGE_INVALID,
)
from pytest_rollouts.scoring.accounting import IN_OUTPUT
from pytest_rollouts.scoring.intervals import outside_words

if TYPE_CHECKING:
    from pytest_rollouts.scoring.aggregate import GroupScore, RunScore
    from pytest_rollouts.scoring.compare_runs import RunComparison


# The failure classes the collector writes, and those agents commonly send that it knows by name.
# A breakdown by a field with many values (task_id) would bury the summary; the file has every value.
BREAKDOWN_VALUES_SHOWN = 10

KNOWN_FAILURE_CLASSES = frozenset(
    {AGENT_RUN_ERROR, AGENT_REQUEST_FAILED, ENVIRONMENT_SERVER_FAILED, CANCELLED, JUDGE_INVALID, RETRYABLE_WITH_OPT_IN}
    | ALWAYS_TERMINAL
)


def score_lines(
    score: RunScore,
    sidecar: str,
    count_as_zero_option: str = "--rollouts-count-as-zero",
    out: str = "the output",
    count_as_zero: frozenset[str] = frozenset(),
    scored: bool = True,
) -> list[str]:
    """Key metrics per group, then the coverage report; numbers come from the score, never recomputed.

    ``count_as_zero_option``: that policy's name where it was given (the merge calls it ``--count-as-zero``).
    ``sidecar``, ``out``: where the rows the score misses are, failures and results.
    ``count_as_zero``: the classes that policy names, a typo among them said at the end.
    ``scored``: false for a run stopped before its metrics (its coverage is all there is).
    """
    lines = []
    coverage = score.coverage
    if coverage.completed == 0 and coverage.expected:
        by_class = ", ".join(f"{n} {c}" for n, c in sorted(coverage.missing_by_class.items()))
        lines.append(
            f"None of the {coverage.expected} materialized rollouts produced a result "
            f"({by_class}{coverage.pointer(sidecar, out)})"
        )
    baseline = None if isinstance(score.baseline, str) else score.baseline
    for group in score.groups:
        if group.metrics:
            lines.extend(_group_lines(group, baseline))
    lines.extend(coverage.report_lines(sidecar, count_as_zero_option, out, scored))
    lines.extend(_policy_typos(count_as_zero, set(coverage.failed_by_class), count_as_zero_option))
    return lines


def _group_lines(group: GroupScore, baseline: RunComparison | None) -> list[str]:
    """At most three lines a group: its score, the interval and bounds (and tokens), the comparison
    with a baseline; then its breakdown by field or dataset."""
    from pytest_rollouts.scoring.metrics_shape import STATISTICS  # see score_lines

    mean_line = _mean_line(group)
    if mean_line is None:
        return [
            f"{group.agent}: its metrics hold no mean/reward ({group.coverage.scored} rollouts scored) "
            f"[{group.source} metrics]"
        ]
    lines = [mean_line]
    # A model agent's tokens join the second line, or stand alone.
    usage = group.metrics.get("usage_summary")
    tokens = usage_line(usage, group.metrics.get("perf_summary") or {}) if usage else None
    second = interval_line(group.agent, group.metrics.get(STATISTICS))
    if tokens:
        second = [f"{second[0]}; {tokens}"] if second else [f"{group.agent}: {tokens}"]
    lines.extend(second)
    compared = None if baseline is None else baseline.group_line(group.agent)
    if compared:
        lines.append(compared)
    lines.extend(breakdown_lines(group.agent, group.metrics.get(STATISTICS)))
    return lines


def _mean_line(group: GroupScore) -> str | None:
    """A group's mean reward with its standard error, pass@k and pass^k; None without a mean."""
    key = group.metrics.get("key_metrics") or {}
    mean, se = group.mean_reward, key.get("sem_clustered/reward")
    if mean is None:
        return None
    shown = f"{mean:.4f}" + (f" ± {se:.4f} (se, tasks as clusters)" if isinstance(se, (int, float)) else "")
    # A k no task has enough rollouts for is said, not dropped (--rollouts-pass-k 5 with 4 repeats).
    passes = ", ".join(
        f"{name.split('/')[0]} {value:.4f}" if value is not None else f"{name.split('/')[0]} - (too few rollouts)"
        for name, value in key.items()
        if name.startswith("pass@")
    )
    # pass^k (every one of k rollouts right) beside pass@k (at least one), where k > 1 tells them apart.
    agent_metrics = group.metrics.get("agent_metrics") or {}
    hats = ", ".join(
        f"pass^{k} {value:.4f}"
        for name in key
        if name.startswith("pass@")
        and (k := name.split("/")[0][5:]) != "1"
        and isinstance(value := agent_metrics.get(f"pass^{k}/reward"), int | float)
    )
    return (
        f"{group.agent}: mean reward {shown} over {group.coverage.scored} rollouts"
        + (f"; {passes}" if passes else "")
        + (f"; {hats}" if hats else "")
        + (f" [{group.source} metrics: {group.note}]" if group.note else f" [{group.source} metrics]")
    )


def usage_line(usage: dict[str, float | None], perf: dict[str, float | None]) -> str:
    """A group's tokens and turns: totals, means per rollout, and tokens per second of the run. A
    value that is none (``null`` in the metrics file, a server's NaN or infinity) is ``-``."""
    said = [
        f"{_amount(usage.get('total_tokens', 0))} tokens ({_amount(usage.get('input_tokens', 0))} in, "
        f"{_amount(usage.get('output_tokens', 0))} out; mean {_amount(usage.get('mean/total_tokens', 0), ',.1f')} "
        "per rollout)"
    ]
    if "num_turns" in usage:
        said.append(f"{_amount(usage['num_turns'])} turns (mean {_amount(usage.get('mean/num_turns'), '.2f')})")
    if CACHE_HITS in usage:
        said.append(f"model cache {_amount(usage[CACHE_HITS])} hits, {_amount(usage.get(CACHE_MISSES))} misses")
    if "total_tokens_per_second" in perf:
        total, out = perf["total_tokens_per_second"], perf.get("output_tokens_per_second", 0)
        said.append(f"{_amount(total)} tokens/s ({_amount(out)} out)")
    return ", ".join(said)


def _amount(value: float | None, spec: str = ",.0f") -> str:
    return format(value, spec) if isinstance(value, int | float) and math.isfinite(value) else "-"


def interval_line(agent: str, entry: object) -> list[str]:
    """``agent: 95% CI [lo, hi] (wilson); Manski bounds [lo, hi] (2 unknown rollouts at 0,1)``: the
    group's ``statistics``, one line, none without them."""
    if not isinstance(entry, dict):
        return []
    outside = entry.get("rewards_outside_range")
    if outside:
        floor, ceiling = entry["reward_range"]
        return [f"{agent}: no Manski bounds: {outside_words(outside, floor, ceiling)} (--rollouts-reward-range)"]
    if entry.get("manski_bounds/reward") is None:
        return []
    ci = entry.get("ci_95/reward")
    shown = f"95% CI [{ci[0]:.4f}, {ci[1]:.4f}] ({entry['ci_method']}); " if ci else ""
    low, high = entry["manski_bounds/reward"]
    floor, ceiling = entry["reward_range"]
    detectable = entry.get("minimum_detectable_difference")
    shows = isinstance(detectable, float) and detectable > 0  # no spread at all: nothing to size
    power = f"; detects a change of {detectable:.4f} (80% power)" if shows else ""
    return [
        f"{agent}: {shown}Manski bounds [{low:.4f}, {high:.4f}] "
        f"({entry['num_rollouts_unknown']} unknown rollouts at {floor:g},{ceiling:g}){power}"
    ]


def breakdown_lines(agent: str, entry: object) -> list[str]:
    """One line per dataset file (when the group has more than one) and per value of the
    ``--rollouts-group-by`` field: each is a group of its own, its mean with interval and bounds.
    At most ``BREAKDOWN_VALUES_SHOWN`` of each; the metrics file has them all."""
    if not isinstance(entry, dict):
        return []
    lines = []
    datasets = entry.get("by_dataset") or {}
    splits = [(f"{entry.get('group_by')}=", entry.get("by_field") or {})]
    if len(datasets) > 1:
        splits.insert(0, ("dataset ", datasets))
    for prefix, values in splits:
        for value, part in list(values.items())[:BREAKDOWN_VALUES_SHOWN]:
            lines.append(f"{agent} [{prefix}{value}]: {_part_line(part)}")
        if len(values) > BREAKDOWN_VALUES_SHOWN:
            lines.append(
                f"{agent}: {len(values) - BREAKDOWN_VALUES_SHOWN} more {prefix.rstrip('= ')} values in the metrics file"
            )
    return lines


def _part_line(part: dict[str, Any]) -> str:
    mean = part.get("mean/reward")
    said = [f"mean reward {mean:.4f} over {part['num_rollouts_scored']} rollouts" if mean is not None else "no reward"]
    ci = part.get("ci_95/reward")
    if ci:
        said.append(f"95% CI [{ci[0]:.4f}, {ci[1]:.4f}] ({part['ci_method']})")
    bounds = part.get("manski_bounds/reward")
    if bounds and part.get("num_rollouts_unknown"):
        said.append(f"Manski bounds [{bounds[0]:.4f}, {bounds[1]:.4f}] ({part['num_rollouts_unknown']} unknown)")
    return "; ".join(said)


def _policy_typos(count_as_zero: frozenset[str], seen: set[str], option: str) -> list[str]:
    """Classes the policy names that nothing can match: a typo (with the nearest class), or an
    outcome that is no failure class (a result kept as sent is never a zero)."""
    lines = []
    results = sorted(count_as_zero & IN_OUTPUT)
    if results:
        lines.append(
            f"{option} {', '.join(results)}: a result kept as sent, not a failure class; never counted as zero"
        )
    known = KNOWN_FAILURE_CLASSES | seen
    for name in sorted(count_as_zero - known - IN_OUTPUT):
        near = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        known_text = ", ".join(sorted(known))
        lines.append(
            f"{option} {name}: no such failure class in this run, nor a known one; {hint}(known: {known_text})"
        )
    return lines
