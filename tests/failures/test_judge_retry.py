"""retry_invalid_judge_responses: a result whose judge answered unusably is a failure resume sends again,
and an earlier run's such results move from the output to the sidecar, once, whatever crash interrupts it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts import CollectionConfig
from pytest_rollouts import run as run_api
from pytest_rollouts.rows.judge_retry import migrate_invalid_judge_rows
from pytest_rollouts.rows.schema import MIGRATED_INVALID_JUDGE

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, keys, port, read_rows, run_rollouts, subprocess_run, tasks, write_rows

OPT_IN = "--rollouts-retry-invalid-judge-responses"


def judge_fails_once(row: dict[str, Any], seen: int) -> Reply:
    """Task 1's judge answers unparseably the first time: the verifier scores it 0 and says so."""
    reply = verifier(row, seen)
    if row["_ng_task_index"] == 1 and seen == 0:
        reply.json.update(reward=0.0, invalid_judge_response=True)
    else:
        reply.json["invalid_judge_response"] = False
    return reply


def run(pytester: pytest.Pytester, agent: ScriptedAgent, *args: str) -> pytest.RunResult:
    return run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", *args)


def test_opted_in_an_invalid_judge_response_is_a_failure_that_resume_sends_again(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    artifacts = Artifacts(pytester.path)
    with ScriptedAgent(judge_fails_once) as agent:
        run(pytester, agent, OPT_IN)
        assert sorted(keys(artifacts.rows)) == [(0, 0), (2, 0)]
        (failure,) = artifacts.failures
        assert failure["_ng_failure_class"] == "judge_invalid"
        assert failure["_ng_failure_terminal"] is False and failure["reward"] == 0.0
        assert (failure["_ng_task_index"], failure["_ng_attempt_index"]) == (1, 0)
        run(pytester, agent, OPT_IN, "--rollouts-resume")
        resent = agent.requests[3:]
    assert [(r["_ng_task_index"], r.get("_ng_attempt_index")) for r in resent] == [(1, 1)]
    assert sorted(keys(artifacts.rows)) == [(0, 0), (1, 0), (2, 0)]
    assert not any(row["invalid_judge_response"] for row in artifacts.rows)


def test_without_the_opt_in_an_invalid_judge_response_is_a_score(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    artifacts = Artifacts(pytester.path)
    with ScriptedAgent(judge_fails_once) as agent:
        run(pytester, agent)
        run(pytester, agent, "--rollouts-resume")
        assert len(agent.requests) == 3
    assert sorted(keys(artifacts.rows)) == [(0, 0), (1, 0), (2, 0)]
    assert not artifacts.failures_path.exists() or not artifacts.failures


def test_a_resume_that_opts_in_moves_earlier_scores_of_invalid_judges_to_the_sidecar(
    pytester: pytest.Pytester,
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    artifacts = Artifacts(pytester.path)
    with ScriptedAgent(judge_fails_once) as agent:
        run(pytester, agent)  # an earlier run (or NeMo Gym's older builds) stored it as a score
        legacy = next(row for row in artifacts.rows if row["_ng_task_index"] == 1)
        run(pytester, agent, OPT_IN, "--rollouts-resume")
        resent = agent.requests[3:]
    assert [(r["_ng_task_index"], r.get("_ng_attempt_index")) for r in resent] == [(1, 1)]
    (moved,) = artifacts.failures
    assert moved == {
        **legacy,
        "_ng_attempt_index": 0,
        "_ng_failure_class": "judge_invalid",
        "_ng_failure_type": "InvalidJudgeResponse",
        "_ng_failure_message": moved["_ng_failure_message"],
        "_ng_failure_http_status": None,
        "_ng_failure_response_body": None,
        "_ng_failure_terminal": False,
        MIGRATED_INVALID_JUDGE: True,
    }
    assert sorted(keys(artifacts.rows)) == [(0, 0), (1, 0), (2, 0)]
    assert [row["invalid_judge_response"] for row in artifacts.rows if row["_ng_task_index"] == 1] == [False]


def legacy_files(tmp_path: Path) -> tuple[Path, Path, list[dict[str, Any]]]:
    """An output holding two judged-invalid results among good ones, and a sidecar with one failure."""
    out, failures = tmp_path / "r.jsonl", tmp_path / "r_failures.jsonl"
    rows = [
        {"_ng_task_index": t, "_ng_rollout_index": 0, "reward": float(t % 2 == 0), "invalid_judge_response": t % 2 == 1}
        for t in range(5)
    ]
    rows[3]["_ng_attempt_index"] = 2
    write_rows(out, rows)
    write_rows(failures, [{"_ng_task_index": 3, "_ng_rollout_index": 0, "_ng_failure_class": "agent_run_error"}])
    return out, failures, rows


def test_the_move_is_idempotent(tmp_path: Path) -> None:
    out, failures, rows = legacy_files(tmp_path)
    assert migrate_invalid_judge_rows(out, failures) == 2
    assert read_rows(out) == [rows[0], rows[2], rows[4]]
    after = read_rows(failures)
    assert [(r["_ng_task_index"], r.get("_ng_attempt_index"), r["_ng_failure_class"]) for r in after] == [
        (3, None, "agent_run_error"),
        (1, 0, "judge_invalid"),
        (3, 2, "judge_invalid"),
    ]
    assert migrate_invalid_judge_rows(out, failures) == 0
    assert read_rows(failures) == after


def test_a_crash_between_the_sidecar_and_the_rewrite_moves_no_row_twice(tmp_path: Path) -> None:
    """The rewrite fails (its private file cannot be created): the rows are in both files, as a kill
    between the two steps leaves them; the next move finishes the rewrite without writing them again."""
    out, failures, rows = legacy_files(tmp_path)
    blocker = tmp_path / f".{out.name}.{os.getpid()}"
    blocker.mkdir()  # where the rewrite's private file would go: opening it fails, as a crash there would
    with pytest.raises(OSError):
        migrate_invalid_judge_rows(out, failures)
    assert read_rows(out) == rows, "the output is untouched"
    assert len(read_rows(failures)) == 3, "the moved rows are already safe in the sidecar"
    blocker.rmdir()
    assert migrate_invalid_judge_rows(out, failures) == 2
    assert read_rows(out) == [rows[0], rows[2], rows[4]]
    assert [r["_ng_task_index"] for r in read_rows(failures)] == [3, 1, 3], "no row moved twice"


def test_a_crash_before_the_sidecar_is_written_leaves_the_output_as_it_was(tmp_path: Path) -> None:
    out, failures, rows = legacy_files(tmp_path)
    failures.unlink()
    failures.mkdir()  # the sidecar cannot be opened: nothing may leave the output
    with pytest.raises(OSError):
        migrate_invalid_judge_rows(out, failures)
    assert read_rows(out) == rows


def test_the_python_api_moves_and_resends_them_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(3))
    artifacts = Artifacts(tmp_path)
    with ScriptedAgent(judge_fails_once) as agent:
        given = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}}
        assert run_api(CollectionConfig(**given)).mean_reward == pytest.approx(1 / 3)
        resumed = run_api(CollectionConfig(**given, resume=True, retry_invalid_judge_responses=True))
        assert [(r["_ng_task_index"], r.get("_ng_attempt_index")) for r in agent.requests[3:]] == [(1, 1)]
    assert resumed.mean_reward == pytest.approx(2 / 3)  # tasks(3): task 0 is answered wrong
    assert [r["_ng_failure_class"] for r in artifacts.failures] == ["judge_invalid"]
    assert sorted(keys(artifacts.rows)) == [(0, 0), (1, 0), (2, 0)]


def test_a_head_servers_config_opts_in(pytester: pytest.Pytester, head_server) -> None:
    """NeMo Gym's merged config carries the collection key at its top level: the run takes it."""
    _, state = head_server
    rows = tasks(3)
    for row in rows:
        row["agent_ref"] = {"name": "judged_agent"}
    write_rows(pytester.path / "data.jsonl", rows)
    artifacts = Artifacts(pytester.path)
    with ScriptedAgent(judge_fails_once) as agent:
        state["yaml"] = (
            "retry_invalid_judge_responses: true\n"
            f"judged_agent:\n  responses_api_agents:\n    simple_agent: {{host: 127.0.0.1, port: {port(agent.url)}}}\n"
        )
        run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={state['address']}")
    assert [r["_ng_failure_class"] for r in artifacts.failures] == ["judge_invalid"]
    assert sorted(keys(artifacts.rows)) == [(0, 0), (2, 0)]


def suite(root: Path, name: str, opted_in: bool, agent: ScriptedAgent) -> None:
    write_rows(root / name / "data.jsonl", tasks(3))
    (root / name / "rollouts.toml").write_text(
        f'datasets = ["*.jsonl"]\nagent = "judged"\nretry_invalid_judge_responses = {str(opted_in).lower()}\n'
        f'[agents.judged]\nurl = "{agent.url}"\n'
    )


def test_a_suite_opts_in_and_an_option_wins_over_it(pytester: pytest.Pytester) -> None:
    artifacts = Artifacts(pytester.path)
    with ScriptedAgent(judge_fails_once) as agent:
        suite(pytester.path, "judged", True, agent)
        run_rollouts(pytester, "judged")
        assert [r["_ng_failure_class"] for r in artifacts.failures] == ["judge_invalid"]
        run_rollouts(pytester, "judged", "-o", "rollouts_retry_invalid_judge_responses=false")
    assert artifacts.failures == [] and len(artifacts.rows) == 3


def test_suites_that_disagree_cannot_share_a_run(pytester: pytest.Pytester) -> None:
    with ScriptedAgent(judge_fails_once) as agent:
        suite(pytester.path, "a", True, agent)
        suite(pytester.path, "b", False, agent)
        result = run_rollouts(pytester, "a", "b")
        assert agent.requests == []
    result.stdout.fnmatch_lines(["*opts in to retry_invalid_judge_responses and *b*rollouts.toml does not*"])


def test_under_xdist_the_earlier_results_move_once(pytester: pytest.Pytester) -> None:
    """Every worker prepares the files in turn; only the first moves anything, so no row is moved twice."""
    write_rows(pytester.path / "data.jsonl", tasks(10))
    artifacts = Artifacts(pytester.path)

    def odd_tasks_fail_once(row: dict[str, Any], seen: int) -> Reply:
        reply = verifier(row, seen)
        reply.json["invalid_judge_response"] = row["_ng_task_index"] % 2 == 1 and seen == 0
        return reply

    with ScriptedAgent(odd_tasks_fail_once) as agent:
        assert subprocess_run(pytester.path, agent.url, "-n", "2").returncode == 0
        resumed = subprocess_run(pytester.path, agent.url, "-n", "2", "--rollouts-resume", OPT_IN)
        assert resumed.returncode == 0, resumed.stdout
        resent = sorted(keys(agent.requests[10:]))
    odd = [(t, 0) for t in range(1, 10, 2)]
    assert resent == odd
    assert sorted(keys(artifacts.failures)) == odd
    assert all(row[MIGRATED_INVALID_JUDGE] for row in artifacts.failures)
    assert sorted(keys(artifacts.rows)) == [(t, 0) for t in range(10)]
