"""A run's timing: the latency of its rollouts, its throughput, and the tokens per second of its
dispatch, one shape whoever measured it (a pytest session from its reports, the Python API from its
outcomes, the live line)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_rollouts.scoring.stats import RUN, ranked


def latency_summary(durations: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p90/p99/max of rollout durations: the other half of a throughput number.

    Raising concurrency raises rollouts per hour while making every rollout slower, right up
    to per-task timeouts; the percentiles make that trade visible.
    """
    if not durations:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
    if len(durations) == 1:
        (x,) = durations
        return {"count": 1, "p50": x, "p90": x, "p99": x, "max": x}
    # statistics.quantiles(sorted, n=100, method="inclusive")'s cut p: between the values ranked j and j + 1.
    cuts = {p: divmod(p * (len(durations) - 1), 100) for p in (50, 90, 99)}
    if len(durations) <= RUN:
        ordered: Mapping[int, float] | list[float] = sorted(durations)
    else:
        ordered = ranked(durations, {j + k for j, _ in cuts.values() for k in (0, 1)} | {len(durations) - 1})
    p50, p90, p99 = ((ordered[j] * (100 - delta) + ordered[j + 1] * delta) / 100 for j, delta in cuts.values())
    return {"count": len(durations), "p50": p50, "p90": p90, "p99": p99, "max": ordered[len(durations) - 1]}


def perf_summary(durations: Sequence[float], seconds: float) -> dict[str, float | int | None]:
    """A run's ``perf_summary``: its latency, and the rollouts it sent per hour of ``seconds``.
    One shape whoever measured it (a pytest session from its reports, the Python API from its
    outcomes), added to groups whose server gives none."""
    return {
        **latency_summary(durations),
        "seconds": seconds,
        "rollouts_per_hour": 3600 * len(durations) / max(seconds, 1e-9),
    }


def token_rates(usage: Mapping[str, float | int] | None, perf: Mapping[str, Any]) -> dict[str, float]:
    """Tokens per second of the session's dispatch (``perf``'s ``seconds``), the throughput a model
    server is sized by: timing, so it goes with ``perf_summary``, not with the totals. None when the
    session sent fewer rollouts than the totals count (a resume): the run's tokens over one
    session's time would overstate it."""
    seconds = perf.get("seconds")
    if not usage or not seconds or perf.get("count", 0) < usage.get("num_rollouts", 0):
        return {}
    return {f"{name}_per_second": usage[name] / seconds for name in ("output_tokens", "total_tokens") if name in usage}
