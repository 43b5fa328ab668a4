"""``ng_trajectory`` and ``ng_perf``: kept as an agent sends them, ``ng_perf`` built from a trajectory
sent without one (NeMo Gym's ``_build_ng_perf``), and both totalled in the metrics file's usage."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from pytest_rollouts.rows.trajectory import build_perf

from ..agents import Reply, ScriptedAgent
from ..helpers import Artifacts, run_rollouts, write_rows


def trajectory(task: int, refs: list[str], captured: list[str], tools: int = 0) -> dict[str, Any]:
    """One invocation referring to the model calls ``refs``, of which ``captured`` were captured, each
    with 100 prompt and 10 completion tokens; ``tools`` tool calls."""
    return {
        "schema_version": "1.0",
        "task_id": str(task),
        "rollout_id": f"{task}-0",
        "invocations": [
            {"kind": "agent_invocation", "invocation_id": "root", "model_calls": [{"model_call_id": r} for r in refs]}
        ],
        "turns": [
            {
                "invocation_id": "root",
                "task_id": str(task),
                "rollout_id": f"{task}-0",
                "turn_no": n + 1,
                "timestamp": 1.0 + n,
                "step_count": n + 1,
                "model_calls": [{"model_call_id": r}],
            }
            for n, r in enumerate(refs)
        ],
        "model_calls": [
            {"model_call_id": c, "token_stats": {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 40}}
            for c in captured
        ],
        "tool_calls": [
            {"kind": "tool_call", "invocation_id": "root", "tool_call_id": f"t{n}", "output": "ok"}
            for n in range(tools)
        ],
        "gaps": [],
    }


# What each task's agent sends besides its reward: a whole trajectory, one whose second turn's call
# was not captured, none, and one with the agent's own ng_perf.
SENT: dict[int, dict[str, Any]] = {
    0: {"ng_trajectory": trajectory(0, ["c1", "c2"], ["c1", "c2"], tools=1)},
    1: {"ng_trajectory": trajectory(1, ["c1", "c2"], ["c1"])},
    2: {"response": {"usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}}},
    3: {"ng_trajectory": trajectory(3, ["c1"], ["c1"]), "ng_perf": {"num_turns": 9, "prompt_tokens": 1}},
}


def agent_with_records(row: dict[str, Any], seen: int) -> Reply:
    return Reply(json={"reward": 1.0, **copy.deepcopy(SENT[row["_ng_task_index"]])})


@pytest.fixture
def run(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[int, dict[str, Any]], dict[str, Any]]:
    write_rows(pytester.path / "data.jsonl", [{"responses_create_params": {"input": f"q{i}"}} for i in range(4)])
    with ScriptedAgent(agent_with_records) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    rows = {r["_ng_task_index"]: r for r in Artifacts(pytester.path).rows}
    (group,) = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
    return result, rows, group


def test_a_trajectory_is_stored_unchanged_and_its_ng_perf_built_from_it(run: Any) -> None:
    result, rows, _ = run
    assert result.ret == 0, result.stdout.str()
    assert rows[0]["ng_trajectory"] == SENT[0]["ng_trajectory"]
    perf = rows[0]["ng_perf"]
    # The rollout's wall time as the dispatcher measured it, in ms.
    assert perf.pop("total_latency_ms") == pytest.approx(1000 * rows[0]["elapsed_seconds"], abs=0.01)
    assert perf == {
        "num_turns": 2,
        "num_tool_calls": 1,
        "token_observability_coverage": 1.0,
        "prompt_tokens": 200,
        "cached_prompt_tokens": 80,
        "completion_tokens": 20,
    }


def test_a_turn_whose_call_was_not_captured_lowers_the_coverage_and_leaves_the_sums(run: Any) -> None:
    _, rows, _ = run
    assert rows[1]["ng_trajectory"] == SENT[1]["ng_trajectory"]
    perf = rows[1]["ng_perf"]
    assert (perf["num_turns"], perf["token_observability_coverage"]) == (2, 0.5)
    assert (perf["prompt_tokens"], perf["completion_tokens"]) == (100, 10)


def test_no_trajectory_no_ng_perf_and_an_agents_own_ng_perf_is_kept(run: Any) -> None:
    _, rows, _ = run
    assert "ng_perf" not in rows[2] and "ng_trajectory" not in rows[2]
    assert rows[3]["ng_perf"] == {"num_turns": 9, "prompt_tokens": 1}
    assert rows[3]["ng_trajectory"] == SENT[3]["ng_trajectory"]


def test_the_usage_summary_takes_tokens_from_usage_or_else_ng_perf_and_says_what_was_observed(run: Any) -> None:
    _, _, group = run
    usage = group["usage_summary"]
    # Tokens: 200+100+7+1 in, 20+10+3 out (task 3's own ng_perf has no completion tokens).
    assert {k: usage[k] for k in ("num_rollouts", "input_tokens", "output_tokens", "total_tokens")} == {
        "num_rollouts": 4,
        "input_tokens": 308,
        "output_tokens": 33,
        "total_tokens": 341,
    }
    assert (usage["num_turns"], usage["num_tool_calls"], usage["num_rollouts_with_ng_perf"]) == (13, 1, 2)
    # Turns observed over all turns of the rollouts whose ng_perf says (not task 3's own): 2 + 1 of 2 + 2.
    assert usage["token_observability_coverage"] == 0.75


def test_build_perf_resolves_each_call_once_and_only_when_unambiguous() -> None:
    record = {
        "invocations": [
            {"invocation_id": "a", "model_calls": [{"model_call_id": "x"}, {"model_call_id": "dup"}]},
            # Claims ``x`` again: one call is counted once. It reports no turns and owns no call: 1 turn.
            {"invocation_id": "b", "model_calls": [{"model_call_id": "x"}]},
            {
                "invocation_id": "c",
                "model_calls": [{"model_ref": {"type": "m", "name": "n"}, "response_id": "r1"}],
            },
        ],
        "model_calls": [
            {"model_call_id": "x", "token_stats": {"completion_tokens": 1}},
            {"model_call_id": "dup", "token_stats": {"completion_tokens": 10}},
            {"model_call_id": "dup", "token_stats": {"completion_tokens": 100}},
            {"response_metadata": {"model_ref": {"type": "m", "name": "n"}, "response_id": "r1"}, "token_stats": {}},
        ],
    }
    assert build_perf(record, None) == {
        "num_turns": 3,  # a: its one resolved call; b: none, so 1; c: its call by (model_ref, response_id)
        "num_tool_calls": 0,
        "token_observability_coverage": pytest.approx(2 / 3),
        "completion_tokens": 1,
    }
    assert build_perf({"invocations": []}, 5.0) is None
    assert build_perf("not a record", 5.0) is None
