"""A pytest session's ``/aggregate_metrics`` is sent by its dispatcher process once it closed
(``dispatch/metrics_relay.py``): a dispatcher that dies or stops while it sends one costs the
group its server's metrics (computed locally, with a note), never the session."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from ..agents import Reply, ScriptedAgent
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
