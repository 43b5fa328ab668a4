"""Every way an agent can misbehave becomes a classified sidecar row, never a crash or a hang."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from pytest_rollouts.store.jsonl import ArtifactError, replaced_atomically

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, run_rollouts, tasks, write_rows

FAILURE_KEYS = {
    "_ng_task_index",
    "_ng_rollout_index",
    "agent_ref",
    "_ng_attempt_index",
    "_ng_failure_class",
    "_ng_failure_type",
    "_ng_failure_message",
    "_ng_failure_http_status",
    "_ng_failure_response_body",
    "_ng_failure_terminal",
    "elapsed_seconds",
    "_ng_earlier_tries",
}


def only_task_1(reply: Reply):
    """Answer task 1 with ``reply`` and every other task normally."""

    def behaviour(row: dict[str, Any], seen: int) -> Reply:
        return reply if row["_ng_task_index"] == 1 else verifier(row, seen)

    return behaviour


def run(pytester: pytest.Pytester, agent: ScriptedAgent, *args: str) -> pytest.RunResult:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    return run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retry-backoff=0.01", *args)


@pytest.mark.parametrize(
    ("reply", "failure_class", "status", "tries"),
    [
        (Reply(status=500, raw=b"Internal Server Error: boom"), "agent_run_error", 500, 1),
        (Reply(status=422, json={"detail": "missing responses_create_params"}), "agent_run_error", 422, 1),
        (Reply(status=503, raw=b"upstream unavailable"), "agent_request_failed", 503, 3),
        (Reply(status=502, raw=b"bad gateway"), "agent_request_failed", 502, 3),
        (Reply(status=200, raw=b"<html>not json</html>"), "agent_run_error", 200, 1),
        (Reply(status=200, json=[1, 2, 3]), "agent_run_error", 200, 1),
        (Reply(reset=True), "agent_request_failed", None, 3),
    ],
)
def test_failure_is_classified_into_the_sidecar(
    pytester: pytest.Pytester, reply: Reply, failure_class: str, status: int | None, tries: int
) -> None:
    """One row for the run's attempt, however many HTTP tries it took: the earlier ones are
    summarised in it (they were one row each, and resume counted them as attempts)."""
    with ScriptedAgent(only_task_1(reply)) as agent:
        result = run(pytester, agent)
    assert result.ret == pytest.ExitCode.OK, "failure classes alone do not fail the session"
    result.stdout.fnmatch_lines([f"*2 passed, 1 {failure_class}*"])
    artifacts = Artifacts(pytester.path)
    assert sorted(r["_ng_task_index"] for r in artifacts.rows) == [0, 2]
    [failure] = artifacts.failures
    assert set(failure) == FAILURE_KEYS
    assert failure["_ng_attempt_index"] == 0
    assert failure["_ng_failure_class"] == failure_class
    assert failure["_ng_failure_http_status"] == status
    assert failure["_ng_failure_terminal"] is False
    tried = failure["_ng_earlier_tries"]
    earlier = [(t["_ng_failure_class"], t["_ng_failure_type"], t["_ng_failure_http_status"]) for t in tried]
    assert earlier == [(failure_class, failure["_ng_failure_type"], status)] * (tries - 1)
    assert all(t["elapsed_seconds"] >= 0 for t in tried)
    sent = [r for r in agent.requests if r["_ng_task_index"] == 1]
    assert len(sent) == tries and all("_ng_attempt_index" not in r for r in sent), "one attempt: index 0"


def test_long_error_body_is_cut_at_2000_characters(pytester: pytest.Pytester) -> None:
    with ScriptedAgent(only_task_1(Reply(status=500, raw=b"x" * 50_000))) as agent:
        run(pytester, agent)
    [failure] = Artifacts(pytester.path).failures
    assert failure["_ng_failure_response_body"] == "x" * 2000


def test_timeout_is_a_request_failure_and_not_retried(pytester: pytest.Pytester) -> None:
    with ScriptedAgent(only_task_1(Reply(delay=5.0, json={"reward": 1.0}))) as agent:
        result = run(pytester, agent, "--rollouts-timeout=0.3")
    result.stdout.fnmatch_lines(["*2 passed, 1 agent_request_failed*"])
    [failure] = Artifacts(pytester.path).failures
    assert failure["_ng_failure_type"] == "TimeoutError"
    # uvloop's clock ticks in whole milliseconds, so its timer may fire a fraction of one early.
    assert 0.299 <= failure["elapsed_seconds"] < 3


def test_a_retry_that_succeeds_is_the_same_attempt_and_leaves_no_failure_row(pytester: pytest.Pytester) -> None:
    """An HTTP retry within a run is no attempt: its request and result carry the run's attempt
    index (none on a first run), and the sidecar, one row per failed attempt, gets nothing."""

    def flaky(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=503) if row["_ng_task_index"] == 1 and seen == 0 else verifier(row, seen)

    with ScriptedAgent(flaky) as agent:
        result = run(pytester, agent)
    result.assert_outcomes(passed=3)
    artifacts = Artifacts(pytester.path)
    assert artifacts.failures == []
    [retried] = [r for r in artifacts.rows if r["_ng_task_index"] == 1]
    assert "_ng_attempt_index" not in retried
    assert [r.get("_ng_attempt_index") for r in agent.requests if r["_ng_task_index"] == 1] == [None, None]


def test_retry_after_header_status_with_zero_retries(pytester: pytest.Pytester) -> None:
    with ScriptedAgent(only_task_1(Reply(status=429))) as agent:
        result = run(pytester, agent, "--rollouts-retries=0")
    result.stdout.fnmatch_lines(["*2 passed, 1 agent_request_failed*"])
    assert len(Artifacts(pytester.path).failures) == 1


def test_dead_server_fails_fast_without_hanging(pytester: pytest.Pytester) -> None:
    """With the health check off (it would stop the session first), every rollout is classified."""
    with ScriptedAgent() as agent:
        url = agent.url  # the port is closed once the server stops
    write_rows(pytester.path / "data.jsonl", tasks(3))
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={url}", "--rollouts-retry-backoff=0.01", "--rollouts-no-health-check"
    )
    result.stdout.fnmatch_lines(["*rollout 0: agent_request_failed after 3 tries: *", "*3 agent_request_failed*"])
    failures = Artifacts(pytester.path).failures
    assert sorted((f["_ng_task_index"], f["_ng_attempt_index"]) for f in failures) == [(0, 0), (1, 0), (2, 0)]
    assert {f["_ng_failure_type"] for f in failures} == {"ClientConnectorError"}
    earlier = [[t["_ng_failure_type"] for t in f["_ng_earlier_tries"]] for f in failures]
    assert earlier == [["ClientConnectorError"] * 2] * 3


def test_agent_classified_failures_are_stored_as_returned(pytester: pytest.Pytester) -> None:
    def classified(row: dict[str, Any], seen: int) -> Reply:
        task = row["_ng_task_index"]
        if task == 0:
            return Reply(json={"_ng_failure_class": "timeout_exceeded", "failure_reason": "agent ran out of time"})
        if task == 1:
            return Reply(json={"_ng_failure_class": "skipped"})
        return Reply(json={"_ng_failure_class": "judge_invalid", "_ng_no_persist": True})

    with ScriptedAgent(classified) as agent:
        result = run(pytester, agent)
    for words in ("1 judge_invalid", "1 rollout_skipped", "1 timeout_exceeded"):
        result.stdout.fnmatch_lines([f"=*{words}*="])
    assert result.ret == 9, "every rollout failed: no rollout produced a reward, so the run is no success"
    artifacts = Artifacts(pytester.path)
    assert artifacts.rows == []
    failures = {f["_ng_task_index"]: f for f in artifacts.failures}
    assert set(failures) == {0, 1}, "_ng_no_persist rows are written nowhere"
    assert failures[0]["_ng_failure_message"] == "agent ran out of time"
    assert failures[0]["_ng_failure_terminal"] is False
    assert failures[1]["_ng_failure_terminal"] is True, "skipped is always terminal"
    assert len(agent.requests) == 3, "agent-classified failures are not retried in-run"
    result.stdout.fnmatch_lines(["*task[[]2[]] rollout 0: judge_invalid (the agent gave no reason)"])
    result.stdout.no_fnmatch_line("*judge_invalid: ")


def test_an_agent_class_named_like_a_collector_outcome_is_kept_apart(pytester: pytest.Pytester) -> None:
    """'no_reward', 'mask_sample' or 'cancelled' from an agent were counted as that outcome in one line
    and as a failure in the next ('3 rollouts reported' of 2); 'cancelled' read 'not started'."""

    def classified(row: dict[str, Any], seen: int) -> Reply:
        names = ["no_reward", "mask_sample", "cancelled"]
        task = row["_ng_task_index"]
        return Reply(json={"_ng_failure_class": names[task]}) if task < 3 else verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(classified) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.stdout.fnmatch_lines(
        ["1 of 4 rollouts scored; failed: agent_cancelled 1, agent_mask_sample 1, agent_no_reward 1"]
    )
    result.stdout.no_fnmatch_line("*not started*")
    failures = Artifacts(pytester.path).failures
    assert sorted(f["_ng_failure_class"] for f in failures) == [
        "agent_cancelled",
        "agent_mask_sample",
        "agent_no_reward",
    ]


def test_a_null_or_empty_class_is_a_result_and_terminal_is_kept_as_returned(pytester: pytest.Pytester) -> None:
    """Agents that send the class key on every reply (null or "" on success) return results; an
    agent's terminal flag is stored as returned, and only a real true stops resume retrying."""

    def replies(row: dict[str, Any], seen: int) -> Reply:
        task = row["_ng_task_index"]
        if task == 0:
            return Reply(json={"_ng_failure_class": None, "reward": 1.0})
        if task == 1:
            return Reply(json={"_ng_failure_class": "", "reward": 0.0})
        if seen == 0:
            return Reply(json={"_ng_failure_class": "judge_invalid", "_ng_failure_terminal": "false"})
        return Reply(json={"reward": 1.0})

    with ScriptedAgent(replies) as agent:
        first = run(pytester, agent)
        assert first.parseoutcomes() == {"passed": 2, "judge_invalid": 1}
        artifacts = Artifacts(pytester.path)
        assert sorted(r["_ng_task_index"] for r in artifacts.rows) == [0, 1]
        [failure] = artifacts.failures
        assert failure["_ng_failure_terminal"] == "false", "stored as returned"
        second = run(pytester, agent, "--rollouts-resume")
        second.assert_outcomes(passed=3)
        assert [r["_ng_task_index"] for r in agent.requests] == [0, 1, 2, 2], "only task 2 is retried"


def test_an_agent_reply_echoing_stamps_is_kept_and_its_own_failure_fields_are_honoured(
    pytester: pytest.Pytester,
) -> None:
    """NeMo Gym 0.7.0 checks ``_is_collector_key`` on an environment server's episode ``result`` only
    (``_episode_record``); an agent's ``/run`` reply that echoes the identity fields is stored with the
    collector's stamps set over them (``result[_ng_task_index] = row[_ng_task_index]``, and so on), and a
    reply carrying ``_ng_failure_class`` goes to the sidecar as returned, its ``_ng_failure_message`` and
    ``_ng_failure_http_status`` included; ``skipped`` is terminal, so resume never sends it again.
    1f82d1a refused both as ``agent_run_error`` ("the reply sets keys only the collector writes") and
    resent them on resume."""

    def replies(row: dict[str, Any], seen: int) -> Reply:
        task = row["_ng_task_index"]
        if task == 0:  # echoes the stamps back, wrong ones among them
            echoed = {"_ng_task_index": 99, "_ng_rollout_index": 7, "agent_ref": {"name": "someone-else"}}
            return Reply(json={**verifier(row, seen).json, **echoed})
        if task == 1:  # classifies its own failure, with the collector's failure fields
            skipped = {"_ng_failure_class": "skipped", "_ng_failure_terminal": True}
            return Reply(json={**skipped, "_ng_failure_message": "no sandbox", "_ng_failure_http_status": 408})
        return Reply(json={**verifier(row, seen).json, "_ng_failure_class": None, "_ng_failure_terminal": False})

    with ScriptedAgent(replies) as agent:
        result = run(pytester, agent)
        assert result.parseoutcomes() == {"passed": 2, "rollout_skipped": 1}
        artifacts = Artifacts(pytester.path)
        rows = {r["_ng_task_index"]: r for r in artifacts.rows}
        assert set(rows) == {0, 2}
        assert (rows[0]["_ng_rollout_index"], rows[0]["agent_ref"]) == (0, {"name": "default"}), "stamps win"
        [failure] = artifacts.failures
        assert failure["_ng_task_index"] == 1
        assert failure["_ng_failure_class"] == "skipped"
        assert (failure["_ng_failure_message"], failure["_ng_failure_http_status"]) == ("no sandbox", 408)
        assert failure["_ng_failure_terminal"] is True
        assert len(agent.requests) == 3
        again = run(pytester, agent, "--rollouts-resume")
        assert again.parseoutcomes() == {"passed": 2, "rollout_skipped": 1}
        assert len(agent.requests) == 3, "nothing is sent again: two results and a terminal skip"


def test_a_skipped_reply_is_stored_as_returned_and_never_sent_again(pytester: pytest.Pytester) -> None:
    """The agent's own ``_ng_failure_terminal`` is stored as it gave it, a false one too (NeMo Gym
    stores the reply as returned, and its resume reads the flag); ``skipped`` is terminal whatever
    the flag says (contracts.md), so our resume never sends it again. The flag was overwritten."""

    def replies(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 1:
            return Reply(json={"_ng_failure_class": "skipped", "_ng_failure_terminal": False})
        return verifier(row, seen)

    with ScriptedAgent(replies) as agent:
        run(pytester, agent)
        [failure] = Artifacts(pytester.path).failures
        assert (failure["_ng_failure_class"], failure["_ng_failure_terminal"]) == ("skipped", False)
        again = run(pytester, agent, "--rollouts-resume")
        assert again.parseoutcomes() == {"passed": 2, "rollout_skipped": 1}
        assert len(agent.requests) == 3, "the skipped rollout is not sent again"


def test_failure_detail_is_shown_and_junitxml_records_it(pytester: pytest.Pytester) -> None:
    with ScriptedAgent(only_task_1(Reply(status=500, raw=b"kaboom"))) as agent:
        result = run(pytester, agent, "-rA", "--junitxml=junit.xml")
    result.stdout.fnmatch_lines(["*rollout 0: agent_run_error: agent answered HTTP 500: kaboom*"])
    junit = (pytester.path / "junit.xml").read_text()
    assert 'failures="1"' in junit and "agent_run_error" in junit
    cases = ElementTree.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    props = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")} for c in cases}
    assert json.loads(props["task[1]"]["rollouts_failures"]) == {"agent_run_error": 1}, "JSON, not a Python repr"
    assert json.loads(props["task[1]"]["rollouts_rewards"]) == [None]
    [row] = [r for r in Artifacts(pytester.path).rows if r["_ng_task_index"] == 0]
    assert json.loads(props["task[0]"]["rollouts_rewards"]) == [row["reward"]]


def test_ordinary_test_failure_still_fails_the_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_bad():\n    assert False\n")
    with ScriptedAgent(only_task_1(Reply(status=500))) as agent:
        result = run(pytester, agent, "test_plain.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    assert "/3 tasks done" in output and "/4 tasks done" not in output, "the .py test is no task"


def test_an_output_place_that_cannot_be_written_is_a_usage_error(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """Was an INTERNALERROR traceback (a read-only directory gave the same)."""
    (pytester.path / "taken").write_text("a file, not a directory")
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", out="taken/r.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot write the artifacts next to *taken/r.jsonl: *File exists*"])
    assert agent.requests == []


def test_a_metrics_file_that_cannot_be_written_is_reported_and_fails_the_run(pytester: pytest.Pytester) -> None:
    """Was an INTERNALERROR in sessionfinish (a full disk at the very end), with no rollouts
    section and a private file left behind."""
    metrics = pytester.path / "out" / "r_aggregate_metrics.json"

    def blocks_the_metrics_file(row: dict[str, Any], seen: int) -> Reply:
        metrics.mkdir(exist_ok=True)  # after the fresh run's start: a directory where the file goes
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(blocks_the_metrics_file) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*default: mean reward 0.6667*", "*cannot write *r_aggregate_metrics.json: Is a directory*"]
    )
    assert [p.name for p in (pytester.path / "out").iterdir() if p.name.startswith(".r_aggregate")] == []


def test_an_artifact_written_atomically_is_whole_or_untouched(tmp_path: Path) -> None:
    target = tmp_path / "m.json"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), replaced_atomically(target) as out:
        out.write(b"half")
        raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["m.json"]
    with replaced_atomically(target) as out:
        out.write(b"new")
    assert target.read_bytes() == b"new"


def test_a_file_the_body_cannot_read_is_named_as_read(tmp_path: Path) -> None:
    """It was reported as 'cannot write <target>', naming the wrong file and the wrong act."""
    target, missing = tmp_path / "merged.jsonl", tmp_path / "shard.jsonl"
    with pytest.raises(ArtifactError) as caught, replaced_atomically(target) as out:
        out.write(missing.read_bytes())
    assert str(caught.value) == f"cannot read {missing} to write {target}: No such file or directory"
    assert list(tmp_path.iterdir()) == []
