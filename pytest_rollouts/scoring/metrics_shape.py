"""The shape of a group's metrics the run reads: numbers where numbers belong, and a ``usage_summary``
with its counts.

A metrics server's ``/aggregate_metrics`` reply is a peer's word, and what it holds reaches the
summary, the report, the gates and the exports, which format and compare it as numbers. A reply
that does not have this shape (``"pass@1/reward": "0.5"``, a ``usage_summary`` without its
counts) is refused whole, named, and the run's own metrics are computed instead, as for a server
that failed to answer. A metrics file read back (the ``report`` command) holds what the run
kept, or what an earlier version or a hand kept: there its odd values are left out and named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Sections whose every value is a number (null: undefined, as local metrics write it).
NUMBERS = ("key_metrics", "agent_metrics", "usage_summary", "perf_summary")
USAGE = "usage_summary"
# What every usage_summary holds (``scoring/usage.py``); a total without its mean is half of one.
USAGE_COUNT = "num_rollouts"
USAGE_TOTALS = ("input_tokens", "output_tokens", "total_tokens", "num_turns", "num_tool_calls")
# How much of an odd value a message quotes.
SHOWN_CHARS = 40


def odd_values(metrics: Mapping[str, Any]) -> list[str]:
    """What in ``metrics`` has not the shape the run reads, each said (``key_metrics pass@1/reward:
    '0.5', not a number``); [] when all of it has."""
    odd = []
    for section in NUMBERS:
        if section not in metrics:
            continue
        values = metrics[section]
        if not isinstance(values, Mapping):
            odd.append(f"{section}: {_shown(values)}, not an object")
            continue
        odd.extend(f"{section} {name}: {_shown(v)}, not a number" for name, v in values.items() if not _number(v))
    usage = metrics.get(USAGE)
    if isinstance(usage, Mapping) and not any(said.startswith(USAGE) for said in odd):
        missing = [USAGE_COUNT] if USAGE_COUNT not in usage else []
        missing += [f"mean/{name}" for name in USAGE_TOTALS if name in usage and f"mean/{name}" not in usage]
        if missing:
            odd.append(f"{USAGE} without {', '.join(missing)}")
    return odd


def without_odd_values(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``metrics`` with each section that has an odd value left out, and what was odd."""
    odd = odd_values(metrics)
    sections = {said.partition(" ")[0].rstrip(":") for said in odd}
    return {name: value for name, value in metrics.items() if name not in sections}, odd


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
