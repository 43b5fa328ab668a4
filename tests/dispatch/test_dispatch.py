"""Rollouts run concurrently, bounded, and stop cleanly; artifacts have the contract's shape."""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any

import orjson
import pytest

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import (
    Artifacts,
    file_size_limit,
    keys,
    one_rollout_dispatcher,
    plan_header,
    pytest_command,
    read_rows,
    run_rollouts,
    stop_midway,
    tasks,
    write_rows,
)

REPO = Path(__file__).resolve().parents[2]


def test_concurrency_reaches_parallel(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(40))
    with ScriptedAgent(latency=0.05) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-parallel=8"
        )
    result.assert_outcomes(passed=40)
    assert agent.peak_in_flight == 8


def test_max_resident_bounds_admitted_rollouts(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(20))
    with ScriptedAgent(latency=0.02) as agent:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-repeats=2",
            "--rollouts-parallel=16",
            "--rollouts-max-resident=4",
        )
    result.assert_outcomes(passed=20)
    assert 2 <= agent.peak_in_flight <= 4
    assert len(Artifacts(pytester.path).rows) == 40


def test_artifact_shapes(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2")
    result.assert_outcomes(passed=2)
    artifacts = Artifacts(pytester.path)
    for row in artifacts.rows:
        assert set(row) == {
            "responses_create_params",
            "response",
            "reward",
            "_ng_task_index",
            "_ng_rollout_index",
            "agent_ref",
            "elapsed_seconds",
        }
        assert row["agent_ref"] == {"name": "default"}
    for row in artifacts.materialized:
        assert set(row) == {
            "responses_create_params",
            "expected_answer",
            "answer",
            "agent_ref",
            "_ng_task_index",
            "_ng_rollout_index",
        }
    assert artifacts.failures == []
    assert sorted(keys(artifacts.rows)) == keys(artifacts.materialized)
    result.stdout.fnmatch_lines(
        [
            "*rollouts*",
            "4 of 4 rollouts scored",
            "4 rollouts ran in *s, */[sh]",
            "default: mean reward 0.5000 ± 0.5000 (se, tasks as clusters) over 4 rollouts; "
            "pass@1 0.5000, pass@2 0.5000; pass^2 0.5000 [[]local metrics[]]",
            "artifacts: out/r.jsonl, out/r_failures.jsonl, out/r_materialized_inputs.jsonl, "
            "out/r_aggregate_metrics.json",
        ]
    )


def test_stamps_override_the_agent_ref_the_agent_echoed(pytester: pytest.Pytester) -> None:
    """A reply echoing an ``agent_ref`` (no collector key: NeMo Gym's collector adds it to the stored
    row) is stored under the collector's stamps: a first attempt has no attempt index, a retry (the
    resume after a failed run) has its own. Echoed ``_ng_*`` stamps are refused (failures/test_failures.py)."""
    write_rows(pytester.path / "data.jsonl", tasks(2))

    def echoes(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 1 and seen == 0:
            return Reply(status=502)
        return Reply(json={**verifier(row, seen).json, "agent_ref": {"name": "z"}})

    with ScriptedAgent(echoes) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retries=0")
        run_rollouts(pytester, *common)
        run_rollouts(pytester, *common, "--rollouts-resume")
    stamped = [
        (r["_ng_task_index"], r["_ng_rollout_index"], r.get("_ng_attempt_index"), r["agent_ref"])
        for r in Artifacts(pytester.path).rows
    ]
    assert sorted(stamped, key=str) == [(0, 0, None, {"name": "default"}), (1, 0, 1, {"name": "default"})]


def test_items_let_go_of_their_properties_once_reported(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """The call report keeps its own copy; at 100k items the items' lists were tens of MB kept to
    the end. junitxml reads them from the teardown report, so with it they stay."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    pytester.makeconftest(
        "import json\n"
        "def pytest_sessionfinish(session):\n"
        "    with open('props.json', 'w') as out:\n"
        "        json.dump([len(item.user_properties) for item in session.items], out)\n"
    )
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}").assert_outcomes(passed=3)
    assert orjson.loads((pytester.path / "props.json").read_bytes()) == [0, 0, 0]
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--junitxml=j.xml")
    assert orjson.loads((pytester.path / "props.json").read_bytes()) == [2, 2, 2]


def test_fresh_run_replaces_artifacts(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-limit=1")
    assert keys(Artifacts(pytester.path).rows) == [(0, 0)]


def test_exitfirst_stops_dispatch_and_leaves_whole_lines(pytester: pytest.Pytester) -> None:
    def first_fails(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 0:
            # Late enough that all 8 are in flight when -x stops the run: pytest now reaches
            # the first item before the dispatcher has started all of them.
            return Reply(status=500, delay=0.5)
        return Reply(delay=30.0, json={"reward": 1.0})

    write_rows(pytester.path / "data.jsonl", tasks(30))
    with ScriptedAgent(first_fails) as agent:
        started = time.monotonic()
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "-x", "--rollouts-parallel=8")
        elapsed = time.monotonic() - started
        assert agent.peak_in_flight == 8
        deadline = time.monotonic() + 5
        while agent.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.in_flight == 0, "in-flight requests were cancelled"
    assert elapsed < 30, "-x did not wait for the slow rollouts"
    result.stdout.fnmatch_lines(["*1 agent_run_error*"])
    # Only failure classes, yet rollouts were left unsent: not a success (was exit 0).
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    artifacts = Artifacts(pytester.path)
    assert artifacts.rows == []
    assert [f["_ng_task_index"] for f in artifacts.failures] == [0]


def test_task_finished_hook_sees_every_item(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    pytester.makeconftest(
        "def pytest_rollouts_task_finished(item, outcomes):\n"
        "    with open('seen.txt', 'a') as f:\n"
        "        f.write(f'{item.name} {[o.reward for o in outcomes]}\\n')\n"
    )
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2")
    assert (pytester.path / "seen.txt").read_text().splitlines() == [
        "task[0] [0.0, 0.0]",
        "task[1] [1.0, 1.0]",
        "task[2] [1.0, 1.0]",
    ]


def test_verbose_shows_rewards(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "-v", "--rollouts-repeats=2")
    result.stdout.fnmatch_lines(
        ["*data.jsonl::task[[]0[]] PASSED (reward 0 0)*", "*data.jsonl::task[[]1[]] PASSED (reward 1 1)*"]
    )


def test_shipped_suites_run_offline_on_the_built_in_agent_and_the_seeded_model(pytester: pytest.Pytester) -> None:
    """The Quick start's first command: three suites, each through the built-in model agent against
    the embedded seeded baseline model, with a spread of scores and the same scores every run."""
    runs = []
    for name in ("first", "second"):
        out = pytester.path / name / "rollouts.jsonl"
        report = pytester.path / name / "report.html"
        result = pytester.runpytest(
            "-p", "no:cacheprovider", str(REPO / "evalsuites"), f"--rollouts-out={out}", f"--rollouts-html={report}"
        )
        result.assert_outcomes(passed=360)
        runs.append(read_rows(out))
        assert report.read_text().startswith("<!DOCTYPE html>"), "the Quick start's report"
    by_suite: dict[str, list[dict[str, Any]]] = {}
    for row in runs[0]:
        by_suite.setdefault(row["agent_ref"]["name"], []).append(row)
    assert sorted(by_suite) == ["arithmetic", "structured", "tool_use"]
    for suite, rows in by_suite.items():
        mean = sum(r["reward"] for r in rows) / len(rows)
        assert 0.2 < mean < 0.95, (suite, mean)
        assert all(r["ng_perf"]["num_turns"] >= 1 and r["ng_perf"]["completion_tokens"] > 0 for r in rows)
    inputs = {
        (r["_ng_task_index"], r["_ng_rollout_index"]): r
        for r in read_rows(pytester.path / "first" / "rollouts_materialized_inputs.jsonl")
    }
    expected = [inputs[r["_ng_task_index"], r["_ng_rollout_index"]]["expected_answer"] for r in by_suite["arithmetic"]]
    assert [r["reward"] for r in by_suite["arithmetic"]] == [
        float(r["extracted_answer"] == answer) for r, answer in zip(by_suite["arithmetic"], expected, strict=True)
    ]
    assert max(r["ng_perf"]["num_turns"] for r in by_suite["tool_use"]) > 1, "the tool loop ran over several turns"

    def scores(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["_ng_task_index"], r["_ng_rollout_index"], r["reward"]) for r in rows)

    assert scores(runs[0]) == scores(runs[1]), "reproducible"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_cancels_in_flight_and_keeps_lines_whole(pytester: pytest.Pytester, stop: int) -> None:
    """A scheduler's SIGTERM stops the run as Ctrl-C does (was: no summary, exit 143)."""
    write_rows(pytester.path / "data.jsonl", tasks(200))
    out = pytester.path / "out" / "r.jsonl"
    with ScriptedAgent(latency=0.2) as agent:
        returncode, output = stop_midway(pytest_command(agent.url, "--rollouts-parallel=8"), pytester.path, out, stop)
        deadline = time.monotonic() + 5
        while agent.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.in_flight == 0, "in-flight requests were cancelled"
    assert returncode == pytest.ExitCode.INTERRUPTED, output.decode()
    assert b"= rollouts =" in output
    # What the stopped run covered, against the whole input (was: "N of N rollouts scored" only).
    assert re.search(rb"Rollouts missing from the score: \d+ of 200 materialized \(no row \d+", output), output
    data = out.read_bytes()
    assert data.endswith(b"\n")
    rows = read_rows(out)
    assert 8 <= len(rows) < 200
    assert len({(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows}) == len(rows)


def test_idle_work_fills_the_waits_on_the_engine(tmp_path: Path) -> None:
    """``on_idle`` fills pytest's waits (called again at once while it says more is waiting) and
    changes nothing in what is dispatched or reported."""
    rows = [orjson.dumps({"answer": i % 2, "expected_answer": 0, "_ng_task_index": i}) for i in range(6)]
    rewards: list[list[float | None]] = []
    calls: list[int] = []  # how many tasks pytest had received at each call

    def idle() -> bool:
        calls.append(len(rewards))
        return len(calls) <= 3  # the first three say more is waiting

    with ScriptedAgent(latency=0.1) as agent:
        dispatcher = one_rollout_dispatcher(tmp_path, rows, agent.url, parallel=2)
        dispatcher.on_idle = idle
        dispatcher.start()
        try:
            for slot in range(len(rows)):
                rewards.append([o.reward for o in dispatcher.wait(slot)])
        finally:
            dispatcher.close()
    assert rewards == [[1.0], [0.0], [1.0], [0.0], [1.0], [0.0]]
    # Chained while waiting on the first task (its result is 0.1 s away), then called on later waits.
    assert calls[:4] == [0, 0, 0, 0] and max(calls) > 0, calls
    assert len(read_rows(tmp_path / "r.jsonl")) == 6


@pytest.mark.asyncio
async def test_a_reply_cancelled_before_its_row_is_written_keeps_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C, -x or the end of the run cancels rollouts; one whose reply has come is still
    written (the dispatcher yields between the reply and the row)."""
    from pytest_rollouts.dispatch import agents
    from pytest_rollouts.dispatch import engine as engine_module
    from pytest_rollouts.rows.planned import COLUMNS

    body = orjson.dumps({"answer": 0, "expected_answer": 0, "_ng_task_index": 0})
    (tmp_path / "m.jsonl").write_bytes(body + b"\n")
    replied = asyncio.Event()
    # Each agent's sender is made from ``agents.post_run`` when the engine starts.
    real_post_run = agents.post_run

    async def post_run(*args: Any, **kwargs: Any) -> Any:
        attempt = await real_post_run(*args, **kwargs)
        replied.set()  # wakes the test only after the rollout has gone on to its next await
        return attempt

    monkeypatch.setattr(agents, "post_run", post_run)
    with ScriptedAgent() as agent:
        header = plan_header(
            urls={"a": agent.url},
            bodies=str(tmp_path / "m.jsonl"),
            out=str(tmp_path / "r.jsonl"),
            failures=str(tmp_path / "f.jsonl"),
        )
        values = {"slot": 0, "task": 0, "rollout": 0, "offset": 0, "length": len(body), "first_attempt": 0}
        columns = {name: array("q", [values.get(name, 0)]) for name in COLUMNS}
        sent: list[bytes] = []
        engine = engine_module.Engine(header, columns, sent.append)
        running = asyncio.create_task(engine.run())
        await replied.wait()
        [rollout] = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "Engine._run"]  # type: ignore[union-attr]
        rollout.cancel()
        engine.input_closed()
        await running
    assert rollout.cancelled()
    assert [row["_ng_task_index"] for row in read_rows(tmp_path / "r.jsonl")] == [0]


# A real dispatcher process with one of its methods replaced by a bug.
BROKEN_ENGINE = """
import sys
from pytest_rollouts.dispatch import engine

def bug(*args):
    raise RuntimeError("injected bug")

setattr(engine.Engine, sys.argv[1], bug)
engine.main()
"""


def engine_process(*args: str, preexec_fn: Any = None) -> subprocess.Popen[bytes]:
    """A dispatcher process as the plugin starts one, with ``args`` after the interpreter."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    pipe = subprocess.PIPE
    return subprocess.Popen([sys.executable, *args], stdin=pipe, stdout=pipe, bufsize=0, env=env, preexec_fn=preexec_fn)


def spawn_watched(patch: pytest.MonkeyPatch, spawn: Any) -> list[subprocess.Popen[bytes]]:
    """Route the session's dispatcher through ``spawn``; a process still alive after 60 s is
    killed, so a hang fails the test instead of blocking the suite."""
    spawned: list[subprocess.Popen[bytes]] = []

    def watched() -> subprocess.Popen[bytes]:
        proc = spawn()
        spawned.append(proc)
        watchdog = threading.Timer(60, proc.kill)
        watchdog.daemon = True
        watchdog.start()
        return proc

    # The module sessions import: pytester drops modules a session imported, so a package
    # attribute (what a dotted name would patch) can be a stale copy.
    patch.setattr(importlib.import_module("pytest_rollouts.pytest.session"), "spawn_engine", watched)
    return spawned


def assert_resume_completes(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """What the failed run left is picked up: every rollout once, none twice."""
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-resume"
    )
    assert result.ret == 0, result.stdout.str()
    rows = Artifacts(pytester.path).rows
    assert sorted(keys(rows)) == sorted({(t, r) for t in range(12) for r in range(2)})


@pytest.mark.parametrize(
    "broken",
    [
        "_progress",  # called in the loop's callback that sends finished tasks to pytest
        "_sync",  # the once-a-second fsync task
    ],
)
def test_a_bug_in_the_dispatcher_stops_the_run_instead_of_hanging_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """A bug outside any one rollout used to be logged by asyncio while pytest waited forever."""

    def spawn() -> subprocess.Popen[bytes]:
        return engine_process("-c", BROKEN_ENGINE, broken)

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(latency=0.2) as agent:
        with monkeypatch.context() as patch:
            spawned = spawn_watched(patch, spawn)
            result = run_rollouts(
                pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-parallel=4"
            )
        [proc] = spawned
        assert proc.wait(timeout=10) == 1
        output = result.stdout.str()
        assert "dispatch stopped: a bug in the dispatcher:" in output, output
        assert "RuntimeError: injected bug" in output
        assert "--rollouts-resume runs what has no row yet" in output
        outcomes = result.parseoutcomes()
        assert outcomes["failed"] == 1 and outcomes.get("passed", 0) < 12, outcomes
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert_resume_completes(pytester, agent)


def test_a_killed_dispatcher_stops_the_run_and_resume_finishes_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_rollouts.dispatch.channel import spawn_engine

    def kill_on_fifth(row: dict[str, Any], seen: int) -> Reply:
        if len(agent.requests) == 5:
            spawned[0].kill()
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(kill_on_fifth, latency=0.05) as agent:
        with monkeypatch.context() as patch:
            spawned = spawn_watched(patch, spawn_engine)
            result = run_rollouts(
                pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-parallel=2"
            )
        output = result.stdout.str()
        assert "dispatch stopped: the dispatcher process exited (killed by signal 9)" in output, output
        assert result.parseoutcomes()["failed"] == 1
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert_resume_completes(pytester, agent)


def test_an_unwritable_output_stops_dispatch_at_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk (here: a file-size limit on the dispatcher) used to fail each task with a
    traceback while every later rollout was still sent and its reply thrown away."""

    def spawn() -> subprocess.Popen[bytes]:
        return engine_process("-m", "pytest_rollouts.dispatch.engine", preexec_fn=file_size_limit(1500))

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(latency=0.05) as agent:
        with monkeypatch.context() as patch:
            spawn_watched(patch, spawn)
            result = run_rollouts(
                pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-parallel=2"
            )
        output = result.stdout.str()
        assert "dispatch stopped: cannot write" in output and "r.jsonl: File too large" in output, output
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert len(agent.requests) < 24, "dispatch went on"
        assert_resume_completes(pytester, agent)


def test_an_output_removed_mid_run_stops_dispatch(pytester: pytest.Pytester) -> None:
    """Rows written after the file was removed reach no file: the run passed, with 0 rows on disk."""
    out = pytester.path / "out" / "r.jsonl"

    def removes_the_output(row: dict[str, Any], seen: int) -> Reply:
        if len(agent.requests) == 4:
            out.unlink()
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(removes_the_output, latency=0.25) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-parallel=2"
        )
        result.stdout.fnmatch_lines(
            ["*dispatch stopped: *r.jsonl was removed or replaced while the run was writing it*"]
        )
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert_resume_completes(pytester, agent)


def test_a_stuck_dispatcher_stops_the_run_instead_of_hanging_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dispatcher that stops answering (here SIGSTOP; in life a blocked file system) used to
    leave pytest waiting forever. Its heartbeat comes every --rollouts-progress-interval (here 0.2 s,
    and pytest's patience 1 s: five beats), so silence means stuck."""
    from pytest_rollouts.dispatch.channel import spawn_engine

    def stop_on_fifth(row: dict[str, Any], seen: int) -> Reply:
        if len(agent.requests) == 5:
            spawned[0].send_signal(signal.SIGSTOP)
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(stop_on_fifth, latency=0.05) as agent:
        with monkeypatch.context() as patch:
            spawned = spawn_watched(patch, spawn_engine)
            dispatch = importlib.import_module("pytest_rollouts.dispatch.channel")
            patch.setattr(dispatch, "SILENCE_LIMIT_S", 1.0)
            patch.setattr(dispatch, "STUCK_GRACE_S", 0.25)
            result = run_rollouts(
                pytester,
                "data.jsonl",
                f"--rollouts-agent={agent.url}",
                "--rollouts-repeats=2",
                "--rollouts-parallel=2",
                "--rollouts-progress-interval=0.2",
            )
        result.stdout.fnmatch_lines(["dispatch stopped: the dispatcher process sent nothing for 1 s: it is stuck*"])
        assert "During handling" not in result.stdout.str()
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert spawned[0].poll() is not None, "the stuck process was killed"
        assert_resume_completes(pytester, agent)
