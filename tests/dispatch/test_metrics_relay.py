"""A pytest session's ``/aggregate_metrics`` is sent by its dispatcher process once it closed
(``dispatch/metrics_relay.py``): a dispatcher that dies or stops while it sends one costs the
group its server's metrics (computed locally, with a note), never the session."""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts.config.bounds import MAX_SECONDS
from pytest_rollouts.dispatch import process as dispatcher_process
from pytest_rollouts.dispatch.lingering import Lingering
from pytest_rollouts.store.jsonl import dumps

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import dispatchers_of, pytest_command, tasks, write_rows
from ..resume.stops import assert_no_traceback, finish, session, wait_for

SLOW = Reply(json={}, delay=60)
METRICS = {"agent_metrics": {"mean/reward": 0.5}, "key_metrics": {"mean/reward": 0.5}}
# Past select's FD_SETSIZE (1024): the dispatcher's pipes are opened above these.
HELD_DESCRIPTORS = 1100
HOLDING_DESCRIPTORS = f"""
import os, resource, sys
import pytest
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
need = {HELD_DESCRIPTORS} + 256
if soft != resource.RLIM_INFINITY and soft < need:
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
null = os.open(os.devnull, os.O_RDONLY)
held = [os.dup(null) for _ in range({HELD_DESCRIPTORS})]
assert min(held) < 1024 < max(held), (min(held), max(held))
sys.exit(pytest.main(sys.argv[1:]))
"""


def served_metrics(cwd: Path, command: list[str]) -> dict[str, Any]:
    """Run ``command`` (a session against a scripted agent that serves ``METRICS``): it ends as
    it should, and its one group's entry in the metrics file is returned."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == pytest.ExitCode.OK, done.stdout + done.stderr
    assert_no_traceback(done.stdout, done.stderr)
    [group] = json.loads((cwd / "out" / "r_aggregate_metrics.json").read_text())
    return group


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


def test_after_the_dispatcher_died_on_one_group_the_next_groups_metrics_are_computed_locally(
    pytester: pytest.Pytester,
) -> None:
    """Two agents, two groups: the dispatcher killed while it sends the first group's request, the
    second is not sent at all (nothing left to send it) and is computed locally too, saying why."""
    rows = [{**row, "agent_ref": {"name": "a" if i % 2 else "b"}} for i, row in enumerate(tasks(4))]
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent(aggregate=lambda body: SLOW) as a, ScriptedAgent(aggregate=lambda body: METRICS) as b:
        command = pytest_command(f"a={a.url}", f"--rollouts-agent=b={b.url}")
        with session(pytester.path, command) as proc:
            wait_for(lambda: bool(a.aggregate_bodies), "the first group's /aggregate_metrics request")
            [dispatcher] = dispatchers_of(proc.pid)
            os.kill(dispatcher, signal.SIGKILL)
            out, err = finish(proc)
        assert b.aggregate_bodies == []
    assert proc.returncode == pytest.ExitCode.OK, out + err
    assert_no_traceback(out, err)
    groups = {
        g["agent_ref"]["name"]: g for g in json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    }
    assert {name: g["metrics_source"] for name, g in groups.items()} == {"a": "local", "b": "local"}
    assert groups["a"]["metrics_note"] == (
        f"{a.url}/aggregate_metrics failed: the dispatcher process went away (killed by signal 9); "
        "computed locally instead"
    )
    assert groups["b"]["metrics_note"] == (
        f"{b.url}/aggregate_metrics failed: the dispatcher process has ended; computed locally instead"
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


def test_a_caller_holding_over_1024_descriptors_still_gets_the_servers_metrics(pytester: pytest.Pytester) -> None:
    """A trainer calling ``pytest.main`` with many files open: the dispatcher's pipes land above
    1024, past what ``select.select`` takes (``ValueError``); the relay's waits and the process's
    end poll instead, so the metrics are the server's and the session ends cleanly."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < HELD_DESCRIPTORS + 256:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}: cannot hold {HELD_DESCRIPTORS} descriptors")
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(aggregate=lambda body: METRICS) as agent:
        command = pytest_command(agent.url)
        assert command[1:3] == ["-m", "pytest"]
        group = served_metrics(pytester.path, [sys.executable, "-c", HOLDING_DESCRIPTORS, *command[3:]])
        assert len(agent.aggregate_bodies) == 1
    assert (group["metrics_source"], group["key_metrics"]) == ("server", METRICS["key_metrics"])


def test_the_longest_timeout_still_gets_the_servers_metrics(pytester: pytest.Pytester) -> None:
    """``--rollouts-timeout`` up to 30 days: the relay's answer is waited for in steps, its write for
    a fixed bound, so no wait passes poll's millisecond range (about 24.8 days, ``OverflowError``).

    The write waits only on a full pipe: the request carries a zero whose task holds a field of
    256 KiB (echoed by the agent, so the zero carries it), past the pipe's 64 KiB."""
    padding = 1 << 18
    rows = [{**row, "padding": "x" * padding if i == 0 else ""} for i, row in enumerate(tasks(3))]
    write_rows(pytester.path / "data.jsonl", rows)

    def behaviour(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 0:
            return Reply(status=400, json={"error": "bad"})
        return Reply(json={**verifier(row, seen).json, "padding": row["padding"]})

    with ScriptedAgent(behaviour, aggregate=lambda body: METRICS) as agent:
        longest = f"--rollouts-timeout={MAX_SECONDS:.0f}"
        group = served_metrics(
            pytester.path, pytest_command(agent.url, longest, "--rollouts-count-as-zero=agent_run_error")
        )
        [body] = agent.aggregate_bodies
    zero = body["verify_responses"][0]
    assert (zero["_ng_task_index"], zero["reward"], len(zero["padding"])) == (0, 0.0, padding)
    assert (group["metrics_source"], group["key_metrics"]) == ("server", METRICS["key_metrics"])


class Unkillable(subprocess.Popen[bytes]):
    """A process as one blocked in the kernel (a hung mount) takes SIGKILL: not before its I/O returns."""

    def kill(self) -> None:
        pass


def test_a_dispatcher_that_does_not_exit_even_when_killed_is_said_by_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing reports it after scoring but ``end``'s caller: ``end`` returns why (and again when
    called again, as ``close`` does after a failed request ended it), and "" for a process that exited."""
    monkeypatch.setattr(dispatcher_process, "CLOSE_TIMEOUT_S", 0.05)
    monkeypatch.setattr(dispatcher_process, "EXIT_SEEN_S", 0.05)
    ignores_its_input = [sys.executable, "-c", "import time; time.sleep(60)"]
    proc = Unkillable(ignores_its_input, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    try:
        lingering = Lingering(proc)
        why = f"the dispatcher process (pid {proc.pid}) did not exit, even when killed"
        assert (lingering.end(), lingering.end()) == (why, why)
        assert proc.poll() is None
    finally:
        subprocess.Popen.kill(proc)
        proc.wait()
    exits = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert Lingering(exits).end() == ""
    assert exits.returncode == 0


def test_a_dispatcher_that_does_not_exit_is_said_last_and_does_not_hold_up_the_summary(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's end only closes the dispatcher's input, so it exits while the summary is
    written; pytest waits for that exit as it unconfigures, and one that did not exit even when
    killed (blocked in the kernel) is the last line, the run's verdict unchanged."""
    monkeypatch.setattr(dispatcher_process, "CLOSE_TIMEOUT_S", 0.05)
    monkeypatch.setattr(dispatcher_process, "EXIT_SEEN_S", 0.05)
    spawned: list[subprocess.Popen[bytes]] = []

    def outliving_engine() -> subprocess.Popen[bytes]:
        """The real dispatcher, under a parent that outlives it and ignores SIGKILL (``Unkillable``)."""
        engine = (
            "import subprocess, sys, time; "
            "subprocess.run([sys.executable, '-m', 'pytest_rollouts.dispatch.engine']); time.sleep(60)"
        )
        here = str(Path(dispatcher_process.__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH"))))}
        command = [sys.executable, "-c", engine]
        spawned.append(Unkillable(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0))
        return spawned[-1]

    # The module the session will import (pytester's in-process runs may have left the package's attribute stale).
    monkeypatch.setattr(importlib.import_module("pytest_rollouts.pytest.session"), "spawn_engine", outliving_engine)
    write_rows(pytester.path / "data.jsonl", tasks(2))
    try:
        with ScriptedAgent() as agent:
            result = pytester.runpytest_inprocess(*pytest_command(agent.url)[3:])
    finally:
        for proc in spawned:
            subprocess.Popen.kill(proc)
            proc.wait()
    assert result.ret == pytest.ExitCode.OK
    [proc] = spawned
    lines = [line for line in result.outlines if line.strip()]
    assert lines[-1] == f"rollouts: the dispatcher process (pid {proc.pid}) did not exit, even when killed"
    assert "2 passed" in lines[-2]
