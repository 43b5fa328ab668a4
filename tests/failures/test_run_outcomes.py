"""A run that speaks: its exit status says when rollouts failed, a reply without a reward is no
pass, and every line of the section counts the same rollouts the same way (issue 18, points 1-3)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts import CollectionConfig, run

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, run_rollouts, tasks, write_rows

TOO_MANY_FAILURES = 9


def closed_port_url() -> str:
    """An address nothing listens on: a dead agent."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def first_breaks(row: dict[str, Any], seen: int) -> Reply:
    """Task 0 answers 400 (agent_run_error, not retried); the others are verified."""
    return Reply(status=400, json={}) if row["_ng_task_index"] == 0 else verifier(row, seen)


# -- 1. an exit status that speaks -------------------------------------------------------------


def test_a_run_in_which_every_rollout_failed_exits_9(pytester: pytest.Pytester) -> None:
    """A dead agent with health checks off exited 0: every rollout failed, and that is no success."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    result = run_rollouts(
        pytester,
        "data.jsonl",
        f"--rollouts-agent={closed_port_url()}",
        "--rollouts-no-health-check",
        "--rollouts-retries=0",
    )
    assert result.ret == TOO_MANY_FAILURES, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "0 of 3 rollouts scored; failed: agent_request_failed 3",
            "EVAL FAILED: no rollout produced a reward (0 of 3 rollouts scored; failed: agent_request_failed 3).",
        ]
    )


@pytest.mark.parametrize(
    ("limit", "status"),
    [("0", TOO_MANY_FAILURES), ("1", 0), ("20%", TOO_MANY_FAILURES), ("25%", 0)],
)
def test_max_failures_takes_a_count_or_a_percentage(pytester: pytest.Pytester, limit: str, status: int) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(first_breaks) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-max-failures={limit}"
        )
    assert result.ret == status, result.stdout.str()
    # What the gate compared is printed whether it passes or not.
    result.stdout.fnmatch_lines([f"--rollouts-max-failures {limit}: 1 of 4 rollouts failed (agent_run_error 1)"])
    failed = (
        f"EVAL FAILED: 1 of 4 rollouts failed (agent_run_error 1), more than --rollouts-max-failures {limit} allows."
    )
    assert (failed in result.stdout.str()) == (status == TOO_MANY_FAILURES)


@pytest.mark.parametrize("value", ["-1", "101%", "some", "1.5"])
def test_a_bad_max_failures_is_a_usage_error_before_anything_is_sent(
    pytester: pytest.Pytester, agent: ScriptedAgent, value: str
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-max-failures={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stderr.str() + result.stdout.str()
    assert "must be a count N >= 0 or a percentage P% with 0 <= P <= 100" in said
    assert said.count(repr(value)) == 1, "the value once: 'not '-1' (got '-1')' showed it twice"
    assert "Traceback" not in result.stderr.str()
    assert agent.requests == []


def test_run_from_config_judges_failures_by_the_same_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(4))
    dead = run(
        CollectionConfig(
            input="data.jsonl",
            out="dead/r.jsonl",
            agents={"policy": closed_port_url()},
            no_health_check=True,
            retries=0,
        )
    )
    assert dead.exit_status == TOO_MANY_FAILURES
    assert "EVAL FAILED: no rollout produced a reward" in dead.summary()
    with ScriptedAgent(first_breaks) as agent:
        strict = run(
            CollectionConfig(input="data.jsonl", out="s/r.jsonl", agents={"policy": agent.url}, max_failures=0)
        )
        tolerant = run(
            CollectionConfig(input="data.jsonl", out="t/r.jsonl", agents={"policy": agent.url}, max_failures="25%")
        )
    assert (strict.exit_status, tolerant.exit_status) == (TOO_MANY_FAILURES, 0)
    assert "EVAL FAILED: 1 of 4 rollouts failed (agent_run_error 1), more than" in strict.summary()
    assert "1 of 4 rollouts failed (agent_run_error 1)" in tolerant.summary()


# -- 2. no reward, no pass ---------------------------------------------------------------------


def test_a_reply_without_a_numeric_reward_is_its_own_outcome(pytester: pytest.Pytester) -> None:
    """``{"score": 1}`` read ``PASSED (reward -)``, and the coverage line pointed to the failures file,
    where that row is not."""
    write_rows(pytester.path / "data.jsonl", tasks(3))

    def task_1_scores_elsewhere(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 1:
            return Reply(json={"score": 1})
        return first_breaks(row, seen)

    with ScriptedAgent(task_1_scores_elsewhere) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "-v")
        result.stdout.fnmatch_lines(["*task[[]1[]] NO_REWARD*"])
        result.stdout.no_fnmatch_line("*PASSED (reward -)*")
        result.stdout.fnmatch_lines(
            [
                "1 of 3 rollouts scored; no_reward 1; failed: agent_run_error 1",
                "*rollout 0: no_reward: the reply has no numeric reward (kept, not scored)",
                "Rollouts missing from the score: 2 of 3 materialized (agent_run_error 1, no_reward 1 routed this run; "
                "see out/r_failures.jsonl; no_reward kept in out/r.jsonl)",
                "*1 passed, 1 agent_run_error, 1 no_reward*",
            ]
        )
        assert result.ret == 0, "no_reward alone is a failed rollout, not a failed run"
        files = Artifacts(pytester.path)
        assert [row["_ng_task_index"] for row in files.failures] == [0], "no failure row for the reply"
        assert [row.get("score") for row in files.rows if row["_ng_task_index"] == 1] == [1], "kept as sent"
        agent.requests.clear()
        resumed = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
        assert [r["_ng_task_index"] for r in agent.requests] == [0], "a result is not sent again"
        resumed.stdout.fnmatch_lines(["*no_reward 1*"])


# -- 3. one count everywhere -------------------------------------------------------------------


def test_masked_rows_are_counted_alike_in_every_line(pytester: pytest.Pytester) -> None:
    """``mask_sample`` rows read "scored" in the first line and not in the coverage lines, and the
    --rollouts-no-aggregate mean included them."""
    write_rows(pytester.path / "data.jsonl", tasks(4))

    def masks_task_0(row: dict[str, Any], seen: int) -> Reply:
        return Reply(
            json={"reward": 1.0 if row["_ng_task_index"] == 0 else 0.0, "mask_sample": row["_ng_task_index"] == 0}
        )

    with ScriptedAgent(masks_task_0) as agent:
        scored = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        scored.stdout.fnmatch_lines(
            [
                "3 of 4 rollouts scored; mask_sample 1",
                "default: mean reward 0.0000*over 3 rollouts*",
                "Metrics cover: 3 of 4*",
            ]
        )
        quick = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-no-aggregate", "-v")
    quick.stdout.fnmatch_lines(
        ["*task[[]0[]] PASSED (reward -; 1 masked)*", "mean reward 0.0000 over 3 rollouts reported this session"]
    )


def test_without_metrics_the_sessions_mean_counts_the_policys_zeros_and_no_coverage_of_metrics(
    pytester: pytest.Pytester,
) -> None:
    """--rollouts-no-aggregate printed 'Metrics cover' with no metrics, and a mean without the zeros
    --rollouts-count-as-zero adds (found by a black-box review)."""
    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(first_breaks) as agent:
        args = ["--rollouts-no-aggregate", "--rollouts-count-as-zero=agent_run_error"]
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", *args)
    result.stdout.fnmatch_lines(
        ["mean reward 0.5000 over 4 rollouts reported this session (1 of them failed and scored as zero)"]
    )
    result.stdout.no_fnmatch_line("Metrics cover*")


def test_a_session_that_reported_part_of_the_run_says_which_line_is_which(pytester: pytest.Pytester) -> None:
    """A resume with ``-k`` reports 1 of the run's 4 tasks: its line read "1 of 1 rollouts scored"
    above "Metrics cover" of the whole run."""
    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(first_breaks) as agent:
        run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume", "-k", "task[1]"
        )
    result.stdout.fnmatch_lines(
        [
            "whole run: 3 of 4 rollouts scored; failed: agent_run_error 1",
            "this session: 1 rollouts reported, 1 scored",
            "Metrics cover: 3 of 4 rollouts",
        ]
    )
    result.stdout.no_fnmatch_line("1 of 1 rollouts scored*")


def test_the_mean_a_passing_gate_compares_is_printed(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """It was printed only when the gate failed."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-fail-under=0.5")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["--rollouts-fail-under 0.5: mean reward 0.6667 over 3 rollouts"])


# -- 6 (part). typos named with their fix --------------------------------------------------------


def test_a_count_as_zero_class_neither_known_nor_seen_is_named_with_the_known_ones(pytester: pytest.Pytester) -> None:
    """``--rollouts-count-as-zero agent_run_eror`` said nothing."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(first_breaks) as agent:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-count-as-zero=agent_run_eror,skipped,no_reward",
        )
    result.stdout.fnmatch_lines(
        [
            "--rollouts-count-as-zero no_reward: a result kept as sent, not a failure class; never counted as zero",
            "--rollouts-count-as-zero agent_run_eror: no such failure class in this run, nor a known one; "
            "did you mean agent_run_error? (known: agent_request_failed, agent_run_error, cancelled, "
            "environment_server_failed, judge_invalid, skipped, timeout_exceeded)",
        ]
    )


def test_a_failed_health_check_reads_as_a_plain_message(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(health=Reply(status=503, json={"detail": "model not loaded"})) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["! Refused: agents failed their health check; nothing was dispatched:"])
    result.stdout.no_fnmatch_line("*_pytest.outcomes.Exit*")
    result.stdout.no_fnmatch_line("Interrupted*"), "a refusal, not a stop"


def test_the_live_line_counts_no_reward_among_failures_as_the_gate_does(pytester: pytest.Pytester) -> None:
    """The progress line's failures left out replies without a reward, which the gate and the
    metrics file count as failed (found by a black-box review)."""
    write_rows(pytester.path / "data.jsonl", tasks(10))
    with ScriptedAgent(lambda row, seen: Reply(json={"score": 1})) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    progress = [line for line in result.stdout.lines if line.startswith("rollouts: ") and "tasks done" in line]
    counts = [re.search(r"(\d+)/10 tasks done, (\d+) failed \(no_reward (\d+)\)", line) for line in progress]
    assert counts and all(c is not None and c[1] == c[2] == c[3] for c in counts), progress


def test_after_x_the_rollouts_that_ran_are_those_sent_not_those_reported(pytester: pytest.Pytester) -> None:
    """-x stops the items while the dispatcher has sent the rest: '4 rollouts ran' counted reports."""
    write_rows(pytester.path / "data.jsonl", tasks(12))

    def first_breaks_last(row: dict[str, Any], seen: int) -> Reply:
        """Task 0 fails once every other task has answered, so -x stops the session after them."""
        return Reply(status=400, json={}, delay=1.0) if row["_ng_task_index"] == 0 else verifier(row, seen)

    with ScriptedAgent(first_breaks_last) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "-x")
    artifacts = Artifacts(pytester.path)
    assert len(artifacts.rows) + len(artifacts.failures) == 12
    result.stdout.fnmatch_lines(
        ["12 rollouts ran in *", "latency p50 *s, p90 *s, p99 *s, max *s over the 1 reported before the stop"]
    )


def test_failures_counted_as_zero_are_scored_in_the_first_line_as_in_the_coverage(pytester: pytest.Pytester) -> None:
    """The first line read '3 of 4 rollouts scored' where 'Metrics cover: 4 of 4' and the metrics file
    counted the failure --rollouts-count-as-zero scores."""
    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(first_breaks) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-count-as-zero=agent_run_error"
        )
    result.stdout.fnmatch_lines(
        [
            "4 of 4 rollouts scored, 1 of them failed and scored as zero; failed: agent_run_error 1",
            "*Metrics cover: 4 of 4 rollouts",
        ]
    )
    metrics = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    assert [group["coverage"]["scored"] for group in metrics if "coverage" in group] == [4]


def test_an_infinite_reward_is_no_reward_everywhere_and_cannot_pass_a_gate(pytester: pytest.Pytester) -> None:
    """Its item said no_reward while the metrics scored it: 'mean reward inf' passed
    --rollouts-fail-under 0.99 (found by a black-box review)."""
    write_rows(pytester.path / "data.jsonl", tasks(4))

    def infinite_first(row: dict[str, Any], seen: int) -> Reply:
        return Reply(raw=b'{"reward": Infinity}') if row["_ng_task_index"] == 0 else Reply(json={"reward": 0.5})

    with ScriptedAgent(infinite_first) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-fail-under=0.99")
    assert result.ret == 7, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["3 of 4 rollouts scored; no_reward 1", "default: mean reward 0.5000 *over 3 rollouts*"]
    )
    metrics = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    assert metrics[0]["coverage"]["unrewarded"] == 1
