"""Repeats, limit, interleave, seeds and run-level overrides, as the materialized file records them."""

from __future__ import annotations

import json

import pytest

from pytest_rollouts.rows.materialize import materialize_row, rollout_order

from ..agents import ScriptedAgent
from ..helpers import Artifacts, keys, run_rollouts, tasks, write_rows


def test_repeats_and_limit(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(5))
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=3", "--rollouts-limit=2"
    )
    result.assert_outcomes(passed=2)
    artifacts = Artifacts(pytester.path)
    assert keys(artifacts.materialized) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert sorted(keys(artifacts.rows)) == keys(artifacts.materialized)
    assert sorted(agent.keys()) == keys(artifacts.materialized)


def test_interleaved_repeats_are_materialized_a_b_a_b(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    result = run_rollouts(
        pytester,
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        "--rollouts-repeats=2",
        "--rollouts-interleave-repeats",
        "--rollouts-max-resident=1",
    )
    result.assert_outcomes(passed=3)
    assert keys(Artifacts(pytester.path).materialized) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    assert len(Artifacts(pytester.path).rows) == 6


def test_seed_and_create_params_reach_the_agent(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    rows = tasks(1)
    rows[0]["responses_create_params"] = {
        "input": "q",
        "temperature": 0.1,
        "metadata": {"extra_body": '{"top_k": 5}', "tag": "x"},
    }
    write_rows(pytester.path / "data.jsonl", rows)
    result = run_rollouts(
        pytester,
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        "--rollouts-repeats=2",
        "--rollouts-repeats-add-seed",
        '--rollouts-responses-create-params={"temperature": 0.7, "max_output_tokens": 64}',
    )
    result.assert_outcomes(passed=1)
    sent = sorted(agent.requests, key=lambda r: r["_ng_rollout_index"])
    for rollout_index, row in enumerate(sent):
        params = row["responses_create_params"]
        assert params["temperature"] == 0.7 and params["max_output_tokens"] == 64 and params["input"] == "q"
        assert params["metadata"]["tag"] == "x"
        assert json.loads(params["metadata"]["extra_body"]) == {"top_k": 5, "seed": rollout_index}
    assert sent == sorted(Artifacts(pytester.path).materialized, key=lambda r: r["_ng_rollout_index"])


def test_materialize_row_matches_nemo_gym_request_shape() -> None:
    row = {"responses_create_params": {"input": []}, "expected_answer": "Paris"}
    out = materialize_row(
        row, task_index=0, rollout_index=0, agent="string_match_simple_agent", create_params={}, add_seed=True
    )
    assert list(out) == [
        "responses_create_params",
        "expected_answer",
        "agent_ref",
        "_ng_task_index",
        "_ng_rollout_index",
    ]
    assert out["responses_create_params"]["metadata"]["extra_body"] == '{"seed": 0}'
    assert row == {"responses_create_params": {"input": []}, "expected_answer": "Paris"}, "input not mutated"


@pytest.mark.parametrize(
    ("interleave", "expected"),
    [
        (False, [(0, 0), (0, 1), (1, 0), (1, 1)]),
        (True, [(0, 0), (1, 0), (0, 1), (1, 1)]),
    ],
)
def test_rollout_order(interleave: bool, expected: list[tuple[int, int]]) -> None:
    assert list(rollout_order([(0, 2), (0, 2)], interleave)) == expected


@pytest.mark.parametrize(
    ("interleave", "expected"),
    [
        (False, [(0, 0), (0, 1), (1, 2), (2, 0), (2, 1), (2, 2)]),
        (True, [(0, 0), (1, 2), (2, 0), (0, 1), (2, 1), (2, 2)]),
    ],
)
def test_rollout_order_of_fanned_out_items(interleave: bool, expected: list[tuple[int, int]]) -> None:
    """Item 1 is item 0's row on a second agent: its one rollout is numbered after item 0's two."""
    assert list(rollout_order([(0, 2), (2, 1), (0, 3)], interleave)) == expected
