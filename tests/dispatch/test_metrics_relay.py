"""A pytest session's ``/aggregate_metrics`` is sent by its dispatcher process once it closed
(``dispatch/metrics_relay.py``): a dispatcher that dies or stops while it sends one costs the
group its server's metrics (computed locally, with a note), never the session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts.store.jsonl import dumps

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import dispatchers_of, pytest_command, tasks, write_rows
from ..resume.stops import assert_no_traceback, finish, session, wait_for

SLOW = Reply(json={}, delay=60)


def test_a_dispatcher_killed_while_it_sends_the_metrics_leaves_them_computed_locally(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(aggregate=lambda body: SLOW) as agent:
        with session(pytester.path, pytest_command(agent.url)) as proc:
            wait_for(lambda: bool(agent.aggregate_bodies), "the /aggregate_metrics request")
            [dispatcher] = dispatchers_of(proc.pid)
            os.kill(dispatcher, signal.SIGKILL)
            out, err = finish(proc)
    assert proc.returncode == pytest.ExitCode.OK, out + err
    assert_no_traceback(out, err)
    [group] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    rewards = [json.loads(line)["reward"] for line in (pytester.path / "out" / "r.jsonl").read_text().splitlines()]
    assert (group["metrics_source"], group["key_metrics"]["mean/reward"]) == ("local", sum(rewards) / 3)
    assert group["metrics_note"] == (
        f"{agent.url}/aggregate_metrics failed: the dispatcher process went away (killed by signal 9); "
        "computed locally instead"
    )


def test_a_dispatcher_stopped_while_it_sends_the_metrics_is_given_up_after_the_timeout(
    pytester: pytest.Pytester,
) -> None:
    """It bounds the request by ``--rollouts-timeout``; stopped, it cannot, so pytest waits that and
    ``ANSWER_GRACE_S`` more, then kills it rather than wait for its exit."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(aggregate=lambda body: SLOW) as agent:
        with session(pytester.path, pytest_command(agent.url, "--rollouts-timeout=1")) as proc:
            wait_for(lambda: bool(agent.aggregate_bodies), "the /aggregate_metrics request")
            [dispatcher] = dispatchers_of(proc.pid)
            os.kill(dispatcher, signal.SIGSTOP)
            out, err = finish(proc)  # within BOUND_S: a stopped process's exit is never waited for
    assert proc.returncode == pytest.ExitCode.OK, out + err
    [group] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    assert group["metrics_source"] == "local"
    assert group["metrics_note"] == (
        f"{agent.url}/aggregate_metrics failed: the dispatcher process did not answer within 6s; "
        "computed locally instead"
    )
    assert not Path(f"/proc/{dispatcher}").exists(), "killed and reaped"


@pytest.mark.parametrize("value", ["NaN", "123456789012345678901234567890"])
def test_an_added_zero_holding_nan_or_a_big_integer_reaches_the_server(pytester: pytest.Pytester, value: str) -> None:
    """A policy's zero carries its task's dataset fields, which may hold NaN or an integer past 64
    bits (read as Python's ``json`` reads them). Sent in a dispatcher message as rows, they were a
    ``TypeError`` out of scoring: no metrics file, exit 1. They go as JSON text, as the body has them."""
    rows = [f'{{"responses_create_params": {{"input": "q{i}"}}, "weight": {value}}}' for i in range(3)]
    (pytester.path / "data.jsonl").write_text("\n".join(rows) + "\n")

    def behaviour(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 0:
            return Reply(status=400, json={"error": "bad"})
        return Reply(raw=orjson.dumps(verifier(row, seen).json)[:-1] + f', "weight": {value}}}'.encode())

    metrics = {"agent_metrics": {"mean/reward": 0.5}, "key_metrics": {"mean/reward": 0.5}}
    with ScriptedAgent(behaviour, aggregate=lambda body: metrics) as agent:
        command = pytest_command(agent.url, "--rollouts-count-as-zero=agent_run_error")
        done = subprocess.run(command, cwd=pytester.path, capture_output=True, text=True, timeout=120)
        assert done.returncode == pytest.ExitCode.OK, done.stdout + done.stderr
        [body] = agent.aggregate_bodies
    zero = body["verify_responses"][0]
    assert (zero["_ng_task_index"], zero["reward"], dumps(zero["weight"])) == (0, 0.0, value.encode())
    [group] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    assert group["metrics_source"] == "server"
