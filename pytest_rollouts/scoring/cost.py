"""What a rollout costs, from a run's own measurements: the tokens and time an eval of another size
would take.

Power advice in tasks alone hides the bill: 400 tasks x 8 repeats is 3,200 rollouts, and what
that means in tokens and hours depends on the agent. The run's metrics file has both: each group's
``usage_summary`` (``mean/total_tokens`` per rollout that reported usage) and ``perf_summary``
(``rollouts_per_hour`` of the session's dispatch at its concurrency, ``p50`` latency). Scaling them
linearly is the estimate: the same agent, concurrency and task mix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.records import metrics_group
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import loads


@datatype(frozen=True)
class RolloutCost:
    """One group's measured cost of a rollout; None where the run did not measure it."""

    tokens: float | None  # mean total tokens per rollout
    per_hour: float | None  # rollouts per hour of dispatch, at the run's concurrency
    latency: float | None  # the median rollout's seconds

    def words(self, rollouts: int) -> str:
        """``3,200 rollouts, 1.2M tokens, 2h 40m`` (what was measured of it)."""
        said = [f"{rollouts:,} rollouts"]
        if self.tokens is not None:
            said.append(f"{_count(self.tokens * rollouts)} tokens")
        if self.per_hour:
            said.append(f"{_duration(3600 * rollouts / self.per_hour)} at this run's rate")
        return ", ".join(said)

    def per_rollout(self) -> str:
        """``a rollout: 850 tokens, median 1.20s; 210 rollouts/h`` for the power command's heading."""
        said = []
        if self.tokens is not None:
            said.append(f"{self.tokens:,.0f} tokens")
        if self.latency is not None:
            said.append(f"median {self.latency:.2f}s")
        if self.per_hour:
            said.append(f"{self.per_hour:,.0f} rollouts/h dispatched")
        return "a rollout of this run: " + (", ".join(said) if said else "no usage or timing measured")


def run_costs(out: Path) -> dict[str, RolloutCost]:
    """Each group's rollout cost from the run's metrics file; empty without one (a run with
    --rollouts-no-aggregate, or NeMo Gym's) or when it cannot be read as JSON."""
    path = ArtifactPaths(out).metrics
    try:
        entries = loads(path.read_bytes()) if path.is_file() else []
    except ValueError:
        return {}
    costs = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            costs[metrics_group(entry)] = RolloutCost(
                _number(entry.get("usage_summary"), "mean/total_tokens"),
                _number(entry.get("perf_summary"), "rollouts_per_hour"),
                _number(entry.get("perf_summary"), "p50"),
            )
    return costs


def _number(section: Any, key: str) -> float | None:
    value = section.get(key) if isinstance(section, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes = round(seconds / 60)
    return f"{minutes // 60}h {minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
