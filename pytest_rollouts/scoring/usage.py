"""A group's ``usage_summary``: what its rollouts cost in tokens and turns, and how much of it was seen
(and, with the model agent's response cache, how many model calls it saved).

A rollout's tokens come from its ``response.usage`` (what a Responses API reply reports), else from
its ``ng_perf`` (``prompt_tokens``, ``completion_tokens``: the sums over the model calls its
trajectory observed, ``rows/trajectory.py``), never both, so no token is counted twice. Turns and
tool calls come from ``ng_perf``. Its ``token_observability_coverage`` says what share of a
rollout's turns those sums cover; the group's is the share of all its turns, so a total read off a
trajectory that lost half its turns does not pass for the whole cost.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_rollouts.rows.schema import CACHE_HITS, CACHE_MISSES, PERF_COVERAGE, PERF_TOOL_CALLS, PERF_TURNS
from pytest_rollouts.scoring.columns import RolloutColumns

# The summary's totals: ``numeric_fields`` gives a row's usage, else its ``ng_perf`` token sums, under
# the usage names, and its ``ng_perf`` counts (a model agent's calls answered from the response cache
# and sent to the model among them, with ``--rollouts-cache``).
TOKENS = ("input_tokens", "output_tokens", "total_tokens")
TOTALS = (*TOKENS, PERF_TURNS, PERF_TOOL_CALLS, CACHE_HITS, CACHE_MISSES)


def usage_summary(rows: RolloutColumns) -> dict[str, float | int] | None:
    """A group's token, turn and tool-call totals and their means per rollout that reports them, and
    its token observability; None for a group whose rows report neither tokens nor an ``ng_perf``.
    What a model run costs is its totals, which ``agent_metrics``' means hide."""
    columns = {name: rows.field(name) for name in TOTALS}
    observed = rows.paired(PERF_COVERAGE, PERF_TURNS)
    if not observed and not any(columns.values()):
        return None
    if len(columns["total_tokens"]) < len(rows) and (columns["input_tokens"] or columns["output_tokens"]):
        # Some row may give its token parts without their total: the rare path, row by row.
        derived = (_counts(rows.values(i)).get("total_tokens") for i in range(len(rows)))
        columns["total_tokens"] = [x for x in derived if x is not None]
    # A row with any of the token counts has its total now.
    summary: dict[str, float | int] = {"num_rollouts": len(columns["total_tokens"])}
    for name in TOTALS:
        values = columns[name]
        if values:
            total = sum(values)
            summary[name] = int(total) if all(map(float.is_integer, values)) else total
            summary[f"mean/{name}"] = total / len(values)
    if observed:
        summary["num_rollouts_with_ng_perf"] = len(observed)
        turns = sum(t for _, t in observed)
        # Turns whose model call (and so its tokens) was observed, over all turns of those rollouts.
        summary[PERF_COVERAGE] = sum(c * t for c, t in observed) / turns if turns else None
    return summary


def _counts(values: Mapping[str, float]) -> dict[str, float]:
    """A rollout's numbers for each total, the total tokens from the two parts when its record
    (an ``ng_perf``) gives only those."""
    counts = {name: values[name] for name in TOTALS if name in values}
    if "total_tokens" not in counts and ("input_tokens" in counts or "output_tokens" in counts):
        counts["total_tokens"] = counts.get("input_tokens", 0.0) + counts.get("output_tokens", 0.0)
    return counts
