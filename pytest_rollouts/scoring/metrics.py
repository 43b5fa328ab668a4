"""Default rollout metrics, used for a group whose servers do not answer ``/aggregate_metrics``.

The names are NeMo Gym 0.7.0's (``mean/reward``, ``mean_across_repeats/mean/reward``, ...), so a
user's dashboards read our file and theirs alike. Pure functions: rows in, a JSON-ready dict out.
Every statistic that is undefined (a spread of one value, a single cluster) is ``None`` rather
than a number that would lie.

A field a row reports as ``NaN`` is missing from that row, and one reported as an infinity is a
value like any other, as in NeMo Gym's default profile (``reward_profile.py``: pandas' ``mean``,
``median``, ``min``, ``max``, ``std`` skip NaN, and a statistic that comes out NaN is dropped):
an infinite reward makes ``mean/reward`` infinite; a ``NaN`` reward leaves the rollout unscored.
An infinite result is a ``NonFinite``; the metrics file, strict JSON, writes it as ``null``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.schema import (
    COLLECTOR_PREFIX,
    ELAPSED,
    PERF,
    PERF_AS_USAGE,
    PERF_LATENCY_MS,
    ROLLOUT_INDEX,
)
from pytest_rollouts.scoring.columns import RolloutColumns
from pytest_rollouts.scoring.stats import (
    across_repeats,
    clustered_sem,
    field_summary,
    interval,
    nan_mean,
    std_dev,
    written,
)
from pytest_rollouts.scoring.task_entries import TaskEntries, no_sample

# Bookkeeping, not measurements: a masked flag and the collector's own timing.
_NOT_METRICS = frozenset({"mask_sample", ELAPSED})
# What JSON gives that is never a number: skipped before any closer look, as most fields are.
_NEVER_NUMBERS = frozenset({str, list, dict, type(None)})
# Every int within this converts to a finite float (past it, ``float`` may overflow).
_FLOAT_RANGE = 1 << 1000


@datatype(slots=True)
class MetricRow:
    """One rollout as the metrics see it: its key and its numeric fields."""

    task: int  # _ng_task_index
    rollout: int  # _ng_rollout_index, as in the files: the key rollout_infos join on
    values: Mapping[str, float]  # the row's numeric fields, "reward" among them when present
    # Its place among its task's rollouts when that is not ``rollout``: a fanned-out agent's indices
    # continue another agent's, but its first rollout of a task is still its repeat 0.
    repeat: int | None = None


def numeric_fields(row: Mapping[str, Any]) -> dict[str, float]:
    """The fields of a stored row that are worth averaging.

    Every numeric top-level field (bools as 0.0/1.0, so verifier flags become rates), except the
    ``_ng_*`` stamps (indices, not measurements) and ``mask_sample``/``elapsed_seconds``. Token
    counts live nested in ``response.usage``; NeMo Gym reports them under their leaf names
    (``input_tokens``, ``cached_tokens``, ...), so every number inside it is flattened to its leaf
    key. A top-level field wins over a usage leaf of the same name, and an earlier leaf over a
    later one. NaN is skipped (a missing value, as pandas takes it); infinities are kept.

    An ``ng_perf`` record adds its counts (``num_turns``, ``num_tool_calls``,
    ``token_observability_coverage``) and, for a row whose usage lacks them, its token sums under
    the usage names (``prompt_tokens`` is ``input_tokens``): one name for one quantity, whichever
    record reported it. Its latency is timing, which ``perf_summary`` covers, not a metric.
    """
    out: dict[str, float] = {}
    for key, value in row.items():
        kind = type(value)
        if kind in _NEVER_NUMBERS or key in _NOT_METRICS or key.startswith(COLLECTOR_PREFIX):
            continue
        number = _number(value, kind)
        if number is not None:
            out[key] = number
    response = row.get("response")
    if type(response) is dict or isinstance(response, Mapping):
        _add_leaves(response.get("usage"), out)
    perf = row.get(PERF)
    if type(perf) is dict or isinstance(perf, Mapping):
        for key, value in perf.items():
            kind = type(value)
            number = None if key == PERF_LATENCY_MS or kind in _NEVER_NUMBERS else _number(value, kind)
            if number is not None:
                out.setdefault(PERF_AS_USAGE.get(key, key), number)
    return out


def _add_leaves(node: Any, out: dict[str, float]) -> None:
    """Numeric leaves of nested mappings, in document order (lists hold no named leaves), each
    unless ``out`` already has its name."""
    if type(node) is not dict and not isinstance(node, Mapping):
        return
    for key, value in node.items():
        kind = type(value)
        if kind is dict:
            _add_leaves(value, out)
        elif kind not in _NEVER_NUMBERS:
            number = _number(value, kind)
            if number is not None:
                out.setdefault(key, number)
            else:
                _add_leaves(value, out)


def _number(value: Any, kind: type) -> float | None:
    """``_as_number``, a row's usual numbers (finite floats, ints in float range) without its checks."""
    if kind is float and -math.inf < value < math.inf:
        return value
    if kind is int and -_FLOAT_RANGE < value < _FLOAT_RANGE:
        return float(value)
    return _as_number(value)


def _as_number(value: Any) -> float | None:
    """A float for ints, floats and bools; None for NaN and anything else (numeric strings too).

    Exact type checks first: every number of every row of a run passes through here.
    """
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else written(value)
    if kind is not int and kind is not bool and not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        return None
    return number if math.isfinite(number) else written(number)


def is_correct(reward: float) -> bool:
    """The pass@k success criterion: a rollout counts as a pass only with full reward.

    Partial credit (0 < reward < 1) is a failure for pass@k; ``mean/reward`` still credits it.
    """
    return reward >= 1.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct.

    The unbiased estimator of Chen et al. 2021, ``1 - C(n-c, k) / C(n, k)``. The ratio of binomials
    is taken as the Codex paper's product ``prod_{j=n-c+1}^{n} (1 - k/j)``, which never forms the
    huge binomials themselves; the cases where it is exactly 0 or 1 return exactly that.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / j for j in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Probability that all k samples drawn from n (c of them correct) are correct: pass^k
    (Yao et al. 2024, tau-bench), ``C(c, k) / C(n, k)``, unbiased as pass@k is.

    The reliability a user sees who asks k times, where pass@k is the chance one try in k works.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    return math.comb(c, k) / math.comb(n, k)


def compute_default_metrics(
    rows: Sequence[MetricRow] | RolloutColumns,
    *,
    expected: Mapping[int, int],
    sample: Callable[[int], Mapping[str, Any] | None] = no_sample,
    pass_ks: Sequence[int] | None = None,
    rewards_by_task: Mapping[int, Sequence[float]] | None = None,
) -> dict[str, Any]:
    """NeMo Gym's aggregate_metrics reply, computed locally for one agent group.

    ``rows`` are the metric input (the caller has already dropped masked rows and added rows
    counted as zero), in any order, or a group's columns of them (``columns.py``). ``expected``
    maps every materialized task of the group to its expected number of rollouts, so tasks and
    rollouts that never arrived show up as missing instead of silently shrinking the denominator.
    A row outside ``expected`` (a task it lacks, a rollout index beyond its count) is still
    counted, with nothing expected of it: no row is lost. ``sample`` gives a task's ``sample``
    (None when unknown); it is called as each task's entry is built, so the caller can read it
    from disk then instead of holding every task's row. ``pass_ks``: the k of pass@k and pass^k
    (``--rollouts-pass-k``); None for 1, 2, 4, ... ``rewards_by_task``: the columns'
    ``field_by_task("reward")``, when the caller has it already (it needs them for the statistics).
    """
    if not isinstance(rows, RolloutColumns):
        rows = RolloutColumns.of_rows((r.task, r.rollout, r.values, r.repeat) for r in rows)
    # group_level_metrics is a lazy sequence: each task's entry is built when it is read
    # (written to the file), never all at once; list() it to hold it.
    fields = rows.field_names()
    by_task = {part.task: part for part in rows.by_task()}
    tasks = sorted(expected.keys() | by_task.keys())
    groups = TaskEntries(tasks, rows, by_task, fields, expected, sample)
    if not len(rows):
        return {"agent_metrics": {}, "key_metrics": {}, "group_level_metrics": groups, "repeat_level_metrics": []}

    num_repeats = max(expected.values(), default=0)
    by_rollout = rows.by_repeat()
    wanted = Counter(expected.get(t, 0) for t in tasks)  # how many tasks expect each number of rollouts
    repeats = [
        _repeat_head(r, by_rollout.get(r, ()), sum(n for e, n in wanted.items() if e > r))
        for r in sorted(set(range(num_repeats)) | by_rollout.keys())
    ]
    agent = _summaries(rows, fields, by_rollout, repeats)
    if len(by_rollout) > 1:  # run-to-run noise needs at least two repeats with data
        for field in fields:
            means = [nan_mean(xs) for ones in by_rollout.values() if (xs := rows.field(field, ones))]
            agent.update(across_repeats(field, means))
        agent["num_repeats"] = num_repeats
    rewards = list((rows.field_by_task("reward") if rewards_by_task is None else rewards_by_task).values())
    if rewards:
        agent["sem_clustered/reward"] = clustered_sem(rewards)
        agent.update(_pass_at_ks(rewards, len(tasks), pass_ks))
    key = {
        name: value
        for name, value in agent.items()
        if name.startswith("mean/") or name == "sem_clustered/reward" or _is_pass_at_k_reward(name)
    }
    return {"agent_metrics": agent, "key_metrics": key, "group_level_metrics": groups, "repeat_level_metrics": repeats}


def _is_pass_at_k_reward(name: str) -> bool:
    return name.startswith("pass@") and name.endswith("/reward")


def _pass_at_ks(
    rewards_by_task: Sequence[Sequence[float]], num_tasks: int, ks: Sequence[int] | None = None
) -> dict[str, float | int | None]:
    """pass@k and pass^k for each k of ``ks``, by default k = 1, 2, 4, ... up to the most scored
    rollouts of any task.

    A task enters pass@k only with at least k scored rollouts (the estimator needs k <= n); the
    others, tasks without any score included, are counted as excluded, so a pass@8 over a handful
    of tasks does not pass for the whole set. Every task weighs the same, whatever its n. A k
    asked for that no task reaches gives a null reward over 0 tasks.
    """
    # Tasks share a few (n, c) pairs (two with one rollout each): each is counted, and its estimates
    # made once. Each mean is fmean's over the tasks' estimates, fsum's exact sum over their count.
    pairs = Counter((len(ys), sum(map(is_correct, ys))) for ys in rewards_by_task)
    out: dict[str, float | int | None] = {}
    for k in ks if ks is not None else _powers_of_two(max(n for n, _ in pairs)):
        enough = {(n, c): tasks for (n, c), tasks in pairs.items() if n >= k}
        counted = sum(enough.values())
        at_k = {p: pass_at_k(*p, k) for p in enough}
        hat_k = {p: pass_hat_k(*p, k) for p in enough}
        out[f"pass@{k}/reward"] = _task_mean(at_k, enough, counted)
        out[f"pass@{k}/num_tasks"] = counted
        out[f"pass@{k}/num_tasks_excluded"] = num_tasks - counted
        out[f"pass^{k}/reward"] = _task_mean(hat_k, enough, counted)
    return out


def _task_mean(
    estimates: Mapping[tuple[int, int], float], tasks: Mapping[tuple[int, int], int], counted: int
) -> float | None:
    """The mean over ``counted`` tasks of the estimate of each one's (n, c) pair (``tasks``: how many
    have each): ``statistics.fmean`` of the list of them, without the list."""
    if not counted:
        return None
    return (
        math.fsum(itertools.chain.from_iterable(itertools.repeat(estimates[p], m) for p, m in tasks.items())) / counted
    )


def _powers_of_two(largest: int) -> list[int]:
    return [1 << i for i in range(largest.bit_length())]


def _summaries(
    rows: RolloutColumns, fields: Sequence[str], by_rollout: Mapping[int, Sequence[int]], repeats: list[dict[str, Any]]
) -> dict[str, Any]:
    """Each field's ``field_summary`` over every rollout, and each repeat's statistics of it written
    into that repeat's entry (``repeats``; ``by_rollout``: each one's rollouts): a repeat of every
    rollout (one a task, the usual run) takes the same values and summary, not a copy of them."""
    agent: dict[str, Any] = {}
    for field in fields:
        xs = rows.field(field)
        summary = field_summary(field, xs)
        agent.update(summary)
        for entry in repeats:
            if len(by_rollout.get(entry[ROLLOUT_INDEX], ())) == len(rows):
                entry.update(_repeat_spread(field, xs, summary))
        del xs  # one field's values held at a time: a million rollouts' are 8 MB
        for entry in repeats:
            ones = by_rollout.get(entry[ROLLOUT_INDEX], ())
            if ones and len(ones) != len(rows) and (xs := rows.field(field, ones)):
                entry.update(_repeat_spread(field, xs, field_summary(field, xs)))
    return agent


def _repeat_head(rollout: int, ones: Sequence[int], expected: int) -> dict[str, Any]:
    """One rollout index across tasks (``ones``: its rollouts), before its fields' statistics
    (``_repeat_spread``): does the score drift between the first and later repeats?"""
    return {ROLLOUT_INDEX: rollout, "sample_count": len(ones), "missing_count": max(0, expected - len(ones))}


def _repeat_spread(field: str, xs: Sequence[float], summary: dict[str, float | None]) -> dict[str, Any]:
    """One field's statistics over one repeat's values ``xs``, their ``field_summary`` first."""
    mean = summary[f"mean/{field}"]
    std = std_dev(xs, mean, ddof=1)
    sem = None if std is None else std / math.sqrt(len(xs))
    p25, p75 = (xs[0], xs[0]) if len(xs) == 1 else statistics.quantiles(xs, n=4, method="inclusive")[::2]
    low, high = interval(mean, sem)
    return {
        **summary,
        f"sem/{field}": sem,
        f"p25/{field}": written(p25),
        f"p75/{field}": written(p75),
        f"ci_low_95/{field}": low,
        f"ci_high_95/{field}": high,
    }
