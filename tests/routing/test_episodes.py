"""Episode (taskset) rows go to their environment server as episode requests, NeMo Gym's native format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ..agents import Reply, ScriptedAgent
from ..helpers import Artifacts, run_rollouts, tasks, write_rows


def _episode_rows() -> list[dict[str, Any]]:
    return [
        {"task_id": {"taskset": "math_v1", "id": f"q{i}"}, "task_input": {"question": f"{i}+1"}, "level": i}
        for i in range(3)
    ]


def environment(body: dict[str, Any], seen: int) -> Reply:
    """Task q1 fails for good; the others score by parity of their rollout."""
    task = body["task"]
    episode = {"episode_id": body["episode_id"], "task_id": task["task_id"]}
    if task["task_id"]["id"] == "q1":
        return Reply(json={**episode, "failure": {"failure_reason": "sandbox crashed", "terminal": True}})
    rollout = int(body["episode_id"]["rollout_id"].split("-")[1])
    return Reply(json={**episode, "result": {"reward": float(rollout % 2 == 0), "answer": "ok"}})


def test_episode_rows_are_sent_as_episodes_and_stored_as_results(pytester: pytest.Pytester) -> None:
    flat = tasks(1)
    write_rows(pytester.path / "suite" / "data.jsonl", _episode_rows() + flat)
    with ScriptedAgent(behaviour=environment) as env, ScriptedAgent() as agent:
        (pytester.path / "suite" / "rollouts.toml").write_text(
            'datasets = ["data.jsonl"]\nagent = "policy"\n'
            f'[agents.policy]\nurl = "{agent.url}"\n[agents.math_env]\nurl = "{env.url}"\n'
            '[tasksets]\nmath_v1 = "math_env"\n'
        )
        result = run_rollouts(pytester, "suite", "--rollouts-repeats=2")
        assert result.parseoutcomes().get("environment_server_failed") == 1
        result.assert_outcomes(passed=3)
        assert env.requests[0] == {
            "episode_id": {"rollout_id": "0-0", "attempt": 0},
            "task": {"task_id": {"taskset": "math_v1", "id": "q0"}, "task_input": {"question": "0+1"}},
        }
        assert sorted(r["episode_id"]["rollout_id"] for r in env.requests) == ["0-0", "0-1", "1-0", "1-1", "2-0", "2-1"]
        assert len(agent.requests) == 2 and agent.requests[0]["agent_ref"] == {"name": "policy"}
    artifacts = Artifacts(pytester.path)
    results = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in artifacts.rows}
    assert results[(0, 0)]["reward"] == 1.0 and results[(2, 1)]["reward"] == 0.0
    assert results[(0, 0)]["_ng_environment_server"] == "math_env" and "agent_ref" not in results[(0, 0)]
    assert results[(0, 0)]["_ng_task_id"] == {"taskset": "math_v1", "id": "q0"}
    failures = artifacts.failures
    assert {f["_ng_failure_class"] for f in failures} == {"environment_server_failed"}
    assert all(f["_ng_failure_terminal"] and f["_ng_failure_message"] == "sandbox crashed" for f in failures)
    materialized = artifacts.materialized
    assert materialized[0]["_ng_environment_server"] == "math_env" and "task_input" in materialized[0]

    with ScriptedAgent(behaviour=environment) as env, ScriptedAgent() as agent:
        again = run_rollouts(
            pytester, "suite", "--rollouts-repeats=2", "--rollouts-resume", f"--rollouts-agent=math_env={env.url}"
        )
        assert env.requests == [], "terminal episode failures are not retried"
        assert again.parseoutcomes().get("environment_server_failed") == 1


def test_unrouted_taskset_stops_before_any_request(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", _episode_rows())
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*data.jsonl:1: no environment server route is configured for taskset 'math_v1'*"])
    assert agent.requests == []


def test_agent_map_routes_a_taskset(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", _episode_rows())
    with ScriptedAgent(behaviour=environment) as env:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent=env={env.url}", "--rollouts-agent-map=math_v1=env"
        )
        result.assert_outcomes(passed=2)
        assert len(env.requests) == 3


def test_episode_rows_keep_their_server_as_identity_on_resume(pytester: pytest.Pytester) -> None:
    """A taskset row routes by its taskset even when the dataset gave it an agent_ref."""
    rows = _episode_rows()
    for row in rows:
        row["agent_ref"] = {"name": "policy"}
    write_rows(pytester.path / "data.jsonl", rows)

    answered: list[str] = []

    def flaky(body: dict[str, Any], seen: int) -> Reply:
        answered.append(body["task"]["task_id"]["id"])
        if answered.count("q2") == 1 and answered[-1] == "q2":
            return Reply(json={"unexpected": True})  # not an episode reply: retried next time
        return Reply(
            json={"episode_id": body["episode_id"], "task_id": body["task"]["task_id"], "result": {"reward": 1.0}}
        )

    args = ("data.jsonl", "--rollouts-agent-map=math_v1=env", "--rollouts-agent=policy=http://127.0.0.1:9")
    with ScriptedAgent(behaviour=flaky) as env:
        first = run_rollouts(pytester, *args, f"--rollouts-agent=env={env.url}", "--rollouts-health-ignore=policy")
        assert first.parseoutcomes().get("environment_server_failed") == 1
        [failure] = Artifacts(pytester.path).failures
        assert failure["_ng_failure_type"] == "InvalidEpisodeReply" and not failure["_ng_failure_terminal"]
        again = run_rollouts(
            pytester, *args, f"--rollouts-agent=env={env.url}", "--rollouts-health-ignore=policy", "--rollouts-resume"
        )
        again.assert_outcomes(passed=3)
        sent = [r["task"]["task_id"]["id"] for r in env.requests]
        # The first run's three requests are concurrent (any arrival order); the resume re-runs q2 only.
        assert sorted(sent[:3]) == ["q0", "q1", "q2"] and sent[3:] == ["q2"], sent
    entries = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    assert [(e["agent_ref"]["name"], e["_ng_environment_server"]) for e in entries] == [("env", "env")]


def test_run_level_params_and_seeds_stay_off_episode_rows_and_only_true_is_terminal(
    pytester: pytest.Pytester,
) -> None:
    """Episode requests carry neither, so their materialized rows (the request bodies) must not;
    a server's ``terminal`` that is not ``true`` (here the string "false") leaves it retryable."""
    write_rows(pytester.path / "suite" / "data.jsonl", _episode_rows()[:1] + tasks(1))

    def fails_once(body: dict[str, Any], seen: int) -> Reply:
        if seen:
            return environment(body, seen)
        episode = {"episode_id": body["episode_id"], "task_id": body["task"]["task_id"]}
        return Reply(json={**episode, "failure": {"message": "flaky", "terminal": "false", "stage": "setup"}})

    with ScriptedAgent(behaviour=fails_once) as env, ScriptedAgent() as agent:
        (pytester.path / "suite" / "rollouts.toml").write_text(
            'datasets = ["data.jsonl"]\nagent = "policy"\n'
            f'[agents.policy]\nurl = "{agent.url}"\n[agents.math_env]\nurl = "{env.url}"\n'
            '[tasksets]\nmath_v1 = "math_env"\n'
        )
        common = ("suite", '--rollouts-responses-create-params={"temperature": 0.5}', "--rollouts-repeats-add-seed")
        run_rollouts(pytester, *common)
        episode_row, flat_row = Artifacts(pytester.path).materialized
        assert "responses_create_params" not in episode_row
        assert flat_row["responses_create_params"]["temperature"] == 0.5
        [failure] = Artifacts(pytester.path).failures
        assert failure["_ng_failure_terminal"] is False
        # The server's own words are kept, whatever it names them (was: an empty message).
        assert failure["_ng_failure_message"] == "flaky"
        assert json.loads(failure["_ng_failure_response_body"]) == {
            "message": "flaky",
            "terminal": "false",
            "stage": "setup",
        }
        again = run_rollouts(pytester, *common, "--rollouts-resume")
        again.assert_outcomes(passed=2)
        assert [r["episode_id"]["attempt"] for r in env.requests] == [0, 1], "retried on resume"


def test_an_episode_result_that_uses_collector_keys_is_refused(pytester: pytest.Pytester) -> None:
    """As NeMo Gym's collector refuses it (``_is_collector_key``): the collector adds its own keys
    to a result, so a result's ``_ng_*`` stamp or observability record would pass for the collector's.
    The rollout becomes a retryable ``environment_server_failed`` naming the keys."""
    write_rows(pytester.path / "data.jsonl", _episode_rows())

    def stamps_its_result(body: dict[str, Any], seen: int) -> Reply:
        episode = {"episode_id": body["episode_id"], "task_id": body["task"]["task_id"]}
        extra = {"q0": {"_ng_rollout_index": 5}, "q1": {"ng_trajectory": {"turns": []}}}
        return Reply(json={**episode, "result": {"reward": 1.0, **extra.get(body["task"]["task_id"]["id"], {})}})

    with ScriptedAgent(behaviour=stamps_its_result) as env:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent=env={env.url}", "--rollouts-agent-map=math_v1=env"
        )
    assert result.parseoutcomes().get("environment_server_failed") == 2
    artifacts = Artifacts(pytester.path)
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in artifacts.rows] == [(2, 0)]
    failures = {f["_ng_task_index"]: f for f in artifacts.failures}
    for task, key in ((0, "_ng_rollout_index"), (1, "ng_trajectory")):
        failure = failures[task]
        assert failure["_ng_failure_class"] == "environment_server_failed"
        assert failure["_ng_failure_type"] == "CollectorKeys"
        assert failure["_ng_failure_message"] == f"the reply sets keys only the collector writes: {key}"
        assert failure["_ng_failure_terminal"] is False
