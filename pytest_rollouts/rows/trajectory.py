"""A rollout's ``ng_perf`` built from its ``ng_trajectory``, as NeMo Gym's collector builds it.

An agent that returns its trajectory (NeMo Gym's ``TrajectoryRecord``: agent invocations, their
turns, the model calls and tool calls they made) but no ``ng_perf`` gets one here, written into
its stored row. An agent's own ``ng_perf`` is kept as it sent it: it may know more than its
trajectory says. The trajectory itself is stored unchanged.

Plain dicts, not the pydantic models NeMo Gym validates with: this runs in the dispatcher for every
result that carries a trajectory, and a trajectory this cannot read yields no ``ng_perf`` rather
than a failed rollout (NeMo Gym's ``_build_ng_perf`` returns None for one it cannot validate).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pytest_rollouts.rows.schema import (
    PERF,
    PERF_COVERAGE,
    PERF_LATENCY_MS,
    PERF_TOKENS,
    PERF_TOOL_CALLS,
    PERF_TURNS,
    TRAJECTORY,
)


def with_perf(reply: dict[str, Any], elapsed: float) -> dict[str, Any]:
    """``reply`` with an ``ng_perf`` built from its ``ng_trajectory`` when it has one and no ``ng_perf``
    of its own; ``elapsed`` (seconds) is the rollout's wall time. Otherwise ``reply`` itself."""
    if TRAJECTORY not in reply or PERF in reply:
        return reply
    perf = build_perf(reply[TRAJECTORY], elapsed * 1000)
    return reply if perf is None else {**reply, PERF: perf}


def build_perf(trajectory: Any, latency_ms: float | None) -> dict[str, Any] | None:
    """NeMo Gym's ``_build_ng_perf``: None unless the trajectory names at least one agent invocation.

    ``num_turns``: each invocation's turn records, else the model calls it owns, else 1 (an invocation
    that ran had a turn). Token sums cover the model calls the invocations' references resolve to,
    each call once; ``token_observability_coverage`` is the fraction of turns that resolved to one,
    the only sign that a turn's tokens are missing from the sums.
    """
    if not isinstance(trajectory, Mapping):
        return None
    invocations = [i for i in _dicts(trajectory.get("invocations")) if isinstance(i.get("invocation_id"), str)]
    if not invocations:
        return None
    calls = _dicts(trajectory.get("model_calls"))
    resolve = _Resolver(calls)
    owned: list[Mapping[str, Any]] = []
    owned_by_invocation: Counter[str] = Counter()
    claimed: set[int] = set()
    for invocation in invocations:
        for ref in _dicts(invocation.get("model_calls")):
            index = resolve(ref)
            if index is None or index in claimed:  # unmatched, ambiguous, or another invocation's
                continue
            claimed.add(index)
            owned.append(calls[index])
            owned_by_invocation[invocation["invocation_id"]] += 1
    turns_by_invocation = Counter(t.get("invocation_id") for t in _dicts(trajectory.get("turns")))
    tools_by_invocation = Counter(t.get("invocation_id") for t in _dicts(trajectory.get("tool_calls")))
    num_turns = sum(
        turns_by_invocation[i["invocation_id"]] or owned_by_invocation[i["invocation_id"]] or 1 for i in invocations
    )
    perf: dict[str, Any] = {
        PERF_TURNS: num_turns,
        PERF_TOOL_CALLS: sum(tools_by_invocation[i["invocation_id"]] for i in invocations),
        PERF_COVERAGE: min(1.0, len(owned) / num_turns),
    }
    for key, stat in PERF_TOKENS.items():
        values = [v for call in owned if type(v := _stats(call).get(stat)) is int]
        if values:
            perf[key] = sum(values)
    if latency_ms is not None:
        perf[PERF_LATENCY_MS] = latency_ms
    return perf


class _Resolver:
    """Which captured call a ``ModelCallRef`` names: by ``model_call_id`` (agreeing with the ref's
    ``model_ref`` and ``response_id`` where it gives them), else by the exact ``model_ref`` and
    ``response_id`` pair; only a single candidate counts, as in NeMo Gym."""

    def __init__(self, calls: list[Mapping[str, Any]]) -> None:
        self._calls = calls
        self._by_id: dict[str, list[int]] = {}
        self._by_response: dict[tuple[Any, Any, str], list[int]] = {}
        for index, call in enumerate(calls):
            if isinstance(call_id := call.get("model_call_id"), str) and call_id:
                self._by_id.setdefault(call_id, []).append(index)
            model, response_id = _metadata(call)
            if model is not None and response_id:
                self._by_response.setdefault((*model, response_id), []).append(index)

    def __call__(self, ref: Mapping[str, Any]) -> int | None:
        call_id, response_id = ref.get("model_call_id"), ref.get("response_id")
        model = _model_ref(ref.get("model_ref"))
        if isinstance(call_id, str) and call_id:
            candidates = [
                index
                for index in self._by_id.get(call_id, [])
                if (ref.get("model_ref") is None or model == _metadata(self._calls[index])[0])
                and (response_id is None or response_id == _metadata(self._calls[index])[1])
            ]
        elif model is not None and isinstance(response_id, str) and response_id:
            candidates = self._by_response.get((*model, response_id), [])
        else:
            candidates = []
        return candidates[0] if len(candidates) == 1 else None


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _stats(call: Mapping[str, Any]) -> Mapping[str, Any]:
    stats = call.get("token_stats")
    return stats if isinstance(stats, Mapping) else {}


def _metadata(call: Mapping[str, Any]) -> tuple[tuple[Any, Any] | None, Any]:
    """A captured call's (model_ref as (type, name), response_id)."""
    meta = call.get("response_metadata")
    if not isinstance(meta, Mapping):
        return None, None
    return _model_ref(meta.get("model_ref")), meta.get("response_id")


def _model_ref(value: Any) -> tuple[Any, Any] | None:
    return (value.get("type"), value.get("name")) if isinstance(value, Mapping) else None
