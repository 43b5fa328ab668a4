"""The report's charts as small aggregates: at 100k rollouts the page draws a few hundred marks,
never one per rollout.

Each function returns plain JSON-ready data the page draws as SVG. pass@k uses scoring's
unbiased estimator (``scoring/metrics.py``) and its success criterion (full reward).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from pytest_rollouts.report.gather import SCORED, RunData
from pytest_rollouts.scoring.metrics import is_correct, pass_at_k

# Bars of a histogram of continuous values, and buckets of a chart over the run.
BINS = 24
BUCKETS = 60
# Rewards with at most this many distinct values get a bar each (0 and 1, or a rubric's steps).
DISCRETE = 11
# pass@k is drawn at every k up to this many rollouts of a task, at powers of two beyond.
EVERY_K = 32


def charts(data: RunData) -> dict[str, Any]:
    return {
        "rewards": reward_distribution(data),
        "pass_k": pass_k_curves(data),
        "latency": latency_histogram([data.rollouts[i].latency for i in data.completed]),
        "latency_over_run": latency_over_run([data.rollouts[i].latency for i in data.completed]),
        "outcomes_over_run": outcomes_over_run([r.status for r in data.rollouts]),
    }


def concurrency_limits(groups: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Each adaptive limit over time (``--rollouts-parallel auto:MAX``), from each group's ``dispatch``
    entry in the metrics: a series per agent and dispatching process, with the retries refused."""
    series, refused = [], 0
    for group, metrics in groups:
        entry = metrics.get("dispatch") if isinstance(metrics.get("dispatch"), dict) else {}
        refused += int(entry.get("retries_refused_by_budget") or 0)
        for limit in entry.get("concurrency_limit") or ():
            name = f"{group} ({limit['worker']})" if limit.get("worker") else group
            series.append({"name": name, "ceiling": limit["ceiling"], "points": limit["points"]})
    return {
        "series": series,
        "seconds": max((s["points"][-1][0] for s in series if s["points"]), default=0),
        "ceiling": max((s["ceiling"] for s in series), default=0),
        "retries_refused": refused,
    }


def reward_distribution(data: RunData) -> dict[str, dict[str, list[Any]]]:
    """Each group's scored rewards: a bar per value when there are few distinct ones, else bins
    over the run's whole reward span (so the groups' bars line up)."""
    by_group: defaultdict[str, list[float]] = defaultdict(list)
    for r in data.rollouts:
        if r.status == SCORED and r.reward is not None:
            by_group[r.group].append(r.reward)
    values = sorted({v for rewards in by_group.values() for v in rewards})
    if len(values) <= DISCRETE:
        labels = [f"{v:g}" for v in values]
        return {
            g: {"labels": labels, "counts": [Counter(rewards)[v] for v in values]}
            for g, rewards in sorted(by_group.items())
        }
    low, high = values[0], values[-1]
    width = (high - low) / BINS
    labels = [f"{low + i * width:.3g}" for i in range(BINS)]
    out = {}
    for g, rewards in sorted(by_group.items()):
        counts = [0] * BINS
        for v in rewards:
            counts[min(int((v - low) / width), BINS - 1)] += 1
        out[g] = {"labels": labels, "counts": counts}
    return out


def pass_k_curves(data: RunData) -> dict[str, list[list[float]]]:
    """Each group's pass@k at each k: the mean over tasks with at least k scored rollouts of
    scoring's estimator, as ``pass@k/reward`` in the metrics is computed; ``[k, pass@k, tasks]``."""
    counts: defaultdict[str, defaultdict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in data.rollouts:
        if r.status == SCORED and r.reward is not None:
            tally = counts[r.group][r.task]
            tally[0] += 1
            tally[1] += is_correct(r.reward)
    curves = {}
    for group, tasks in sorted(counts.items()):
        most = max(n for n, _ in tasks.values())
        ks = list(range(1, min(most, EVERY_K) + 1))
        ks += [k for k in (1 << i for i in range(6, most.bit_length())) if k > EVERY_K] + (
            [most] if most > EVERY_K else []
        )
        curve = []
        for k in sorted(set(ks)):
            enough = [pass_at_k(n, c, k) for n, c in tasks.values() if n >= k]
            curve.append([k, statistics.fmean(enough), len(enough)])
        curves[group] = curve
    return curves


def latency_histogram(latencies: Sequence[float | None]) -> dict[str, Any]:
    """Results' latencies in bins up to the 99th percentile, the slower ones in a last bar."""
    values = sorted(v for v in latencies if v is not None)
    if not values:
        return {"n": 0}
    p99 = _quantile(values, 0.99)
    top = p99 if p99 > 0 else values[-1] or 1.0
    width = top / BINS
    counts = [0] * (BINS + 1)
    for v in values:
        counts[min(int(v / width), BINS) if width else 0] += 1
    return {
        "n": len(values),
        "edges": [round(i * width, 6) for i in range(BINS + 1)],
        "counts": counts,
        **{name: _quantile(values, q) for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
        "max": values[-1],
    }


def latency_over_run(latencies: Sequence[float | None]) -> dict[str, Any]:
    """In completion order, buckets of consecutive results: each one's p50, p90 and slowest."""
    size = max(1, -(-len(latencies) // BUCKETS))
    points = []
    for start in range(0, len(latencies), size):
        values = sorted(v for v in latencies[start : start + size] if v is not None)
        if values:
            points.append([start, _quantile(values, 0.5), _quantile(values, 0.9), values[-1]])
    return {"size": size, "n": len(latencies), "points": points}


def outcomes_over_run(statuses: Sequence[str]) -> dict[str, Any]:
    """In dispatch order (the materialized file's), buckets of consecutive rollouts: how many of
    each outcome, so a stretch of the run where an environment broke shows as a band."""
    size = max(1, -(-len(statuses) // BUCKETS))
    names = sorted(set(statuses), key=lambda s: (s != SCORED, s))
    buckets = []
    for start in range(0, len(statuses), size):
        tally = Counter(statuses[start : start + size])
        buckets.append([tally[name] for name in names])
    return {"size": size, "n": len(statuses), "statuses": names, "buckets": buckets}


def _quantile(values: Sequence[float], q: float) -> float:
    """Nearest rank of sorted ``values``."""
    return values[min(len(values) - 1, max(0, round(q * len(values) + 0.5) - 1))]
