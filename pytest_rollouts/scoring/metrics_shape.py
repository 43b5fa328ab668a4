"""The shape of a group's metrics the run reads: numbers where numbers belong, and a ``usage_summary``
with its counts.

A metrics server's ``/aggregate_metrics`` reply is a peer's word, and what it holds reaches the
summary, the report, the gates and the exports, which format and compare it as numbers. A reply
that does not have this shape (``"pass@1/reward": "0.5"``, a ``usage_summary`` without its
counts) is refused whole, named, and the run's own metrics are computed instead, as for a server
that failed to answer. A metrics file read back (the ``report`` command) holds what the run
kept, or what an earlier version or a hand kept: there its odd values are left out and named,
and so is a section the run itself writes (``statistics``, ``coverage``) that a hand changed
into something else (a string, a one-number interval, a list where counts by class belong).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Sections whose every value is a number (null: undefined, as local metrics write it).
NUMBERS = ("key_metrics", "agent_metrics", "usage_summary", "perf_summary")
# Of those, the ones a reply may give as null for none at all: NeMo Gym 0.7.0's agents answer
# ``"perf_summary": null``, and the run then writes its own, as for a reply without one.
MAY_BE_NULL = frozenset(("usage_summary", "perf_summary"))
USAGE = "usage_summary"
# What every usage_summary holds (``scoring/usage.py``); a total without its mean is half of one.
USAGE_COUNT = "num_rollouts"
USAGE_TOTALS = ("input_tokens", "output_tokens", "total_tokens", "num_turns", "num_tool_calls")
# How much of an odd value a message quotes.
SHOWN_CHARS = 40
# What a group's ``statistics`` (``scoring/run_statistics.py``) and each of its breakdowns' parts
# hold: pairs of numbers, counts, numbers and words; None where undefined.
STATISTICS = "statistics"
PAIRS = ("reward_range", "ci_95/reward", "manski_bounds/reward", "rewards_outside_range")
COUNTS = ("num_tasks", "num_rollouts_scored", "num_rollouts_unknown")
SCALARS = ("mean/reward", "minimum_detectable_difference")
WORDS = ("ci_method", "group_by")
BREAKDOWNS = ("by_dataset", "by_field")
# What each value, present, needs beside it to be said (``scoring/summary.py``), in a part of a
# breakdown and, more, in the group's own statistics.
PART_NEEDS = {"ci_95/reward": ("ci_method",), "mean/reward": ("num_rollouts_scored",)}
NEEDS = {
    **PART_NEEDS,
    "manski_bounds/reward": ("reward_range", "num_rollouts_unknown", "num_rollouts_scored"),
    "rewards_outside_range": ("reward_range",),
}
# A group's ``coverage`` (``Coverage.as_dict``): counts, and counts by class.
COVERAGE = "coverage"
BY_CLASS = ("missing_by_class", "failed_by_class")


def odd_values(metrics: Mapping[str, Any]) -> list[str]:
    """What in ``metrics`` has not the shape the run reads, each said (``key_metrics pass@1/reward:
    '0.5', not a number``); [] when all of it has."""
    odd = []
    for section in NUMBERS:
        if section not in metrics:
            continue
        values = metrics[section]
        if values is None and section in MAY_BE_NULL:
            continue
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
    """``metrics`` (a metrics file's entry) with each section that has an odd value left out, and
    what was odd: also in the sections the run writes itself."""
    odd = odd_values(metrics)
    if STATISTICS in metrics:
        odd += odd_statistics(metrics[STATISTICS])
    if COVERAGE in metrics:
        odd += odd_coverage(metrics[COVERAGE])
    sections = {said.partition(" ")[0].rstrip(":") for said in odd}
    return {name: value for name, value in metrics.items() if name not in sections}, odd


def odd_statistics(values: Any, where: str = STATISTICS) -> list[str]:
    """What in a group's ``statistics`` (or one part of a breakdown, ``where``) has not its shape."""
    if not isinstance(values, Mapping):
        return [f"{where}: {_shown(values)}, not an object"]
    kinds = [(PAIRS, _pair, "two numbers"), (COUNTS, _count, "a count"), (SCALARS, _number, "a number")]
    kinds.append((WORDS, lambda v: v is None or isinstance(v, str), "a word"))
    odd = [
        f"{where} {name}: {_shown(values[name])}, not {what}"
        for names, fits, what in kinds
        for name in names
        if name in values and not fits(values[name])
    ]
    odd += [
        f"{where} {name} without {', '.join(missing)}"
        for name, needed in (NEEDS if where == STATISTICS else PART_NEEDS).items()
        if values.get(name) is not None and (missing := [n for n in needed if values.get(n) is None])
    ]
    for name in BREAKDOWNS:
        parts = values.get(name)
        if parts is not None and not isinstance(parts, Mapping):
            odd.append(f"{where} {name}: {_shown(parts)}, not an object")
        elif parts:
            odd.extend(
                said for value, part in parts.items() for said in odd_statistics(part, f"{where} {name} {value}")
            )
    return odd


def odd_coverage(values: Any) -> list[str]:
    """What in a group's ``coverage`` has not its shape: counts, and counts by class."""
    if not isinstance(values, Mapping):
        return [f"{COVERAGE}: {_shown(values)}, not an object"]
    odd = [
        f"{COVERAGE} {name}: {_shown(value)}, not a count"
        for name, value in values.items()
        if name not in BY_CLASS and not _count(value)
    ]
    for name in BY_CLASS:
        by_class = values.get(name)
        if by_class is not None and not (isinstance(by_class, Mapping) and all(map(_count, by_class.values()))):
            odd.append(f"{COVERAGE} {name}: {_shown(by_class)}, not counts by class")
    return odd


def _pair(value: Any) -> bool:
    return value is None or (
        isinstance(value, list) and len(value) == 2 and all(v is not None and _number(v) for v in value)
    )


def _count(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
