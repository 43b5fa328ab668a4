"""``run_from_config`` / ``run``: the plugin's whole run from Python, in the caller's event loop.

Real agents on 127.0.0.1 and real files; each test runs in its own directory (``chdir``), since
datasets and messages are named relative to where the run starts.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import pytest_rollouts
import pytest_rollouts.scoring.configured
from pytest_rollouts import CollectionConfig, CollectionRefused, run, run_from_config
from pytest_rollouts.rows.records import RolloutOutcome

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import aggregate, read_rows, tasks, write_rows


@pytest.fixture(autouse=True)
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(6))
    yield tmp_path


def config(agent: ScriptedAgent, **changes: Any) -> CollectionConfig:
    return CollectionConfig(**{"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}, **changes})


def keys(path: Path) -> list[tuple[int, int]]:
    return sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in read_rows(path))


def test_a_run_writes_the_plugins_files_and_returns_its_score(agent: ScriptedAgent, here: Path) -> None:
    result = run(config(agent, repeats=2))
    out = here / "out"
    assert (
        keys(out / "r.jsonl") == keys(out / "r_materialized_inputs.jsonl") == [(t, r) for t in range(6) for r in (0, 1)]
    )
    assert (out / "r_failures.jsonl").read_bytes() == b""
    assert orjson.loads((out / "r_run_manifest.json").read_bytes())["datasets"][0]["path"] == "data.jsonl"
    # tasks(6): every third answered wrong (tasks 0 and 3), so 8 of 12 rollouts score 1.
    assert result.mean_reward == pytest.approx(8 / 12)
    assert result.exit_status == 0
    [group] = result.metrics
    assert group["metrics_source"] == "local" and group["coverage"]["completed"] == 12
    assert result.metrics == orjson.loads((out / "r_aggregate_metrics.json").read_bytes())
    assert "policy: mean reward 0.6667" in result.summary()
    assert sorted(agent.keys()) == [(t, r) for t in range(6) for r in (0, 1)]


def test_failed_rollouts_are_sidecar_rows_and_a_resume_sends_only_them(here: Path) -> None:
    broken = {1, 4}

    def fails_some(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] in broken:
            return Reply(status=500, json={"error": "boom"})
        return verifier(row, seen)

    with ScriptedAgent(fails_some) as agent:
        first = run(config(agent, retries=0))
        assert first.exit_status == 0  # failure classes alone do not fail a run
        assert first.score.coverage.completed == 4
        failures = read_rows(here / "out" / "r_failures.jsonl")
        assert {(r["_ng_task_index"], r["_ng_failure_class"]) for r in failures} == {
            (1, "agent_run_error"),
            (4, "agent_run_error"),
        }
        broken.clear()
        sent = len(agent.requests)
        resumed = run(config(agent, retries=0, resume=True))
        assert sorted(agent.keys()[sent:]) == [(1, 0), (4, 0)]
    assert resumed.score.coverage.completed == 6
    assert keys(here / "out" / "r.jsonl") == [(t, 0) for t in range(6)]


def test_a_bad_row_is_refused_with_file_and_line_before_anything_is_sent(agent: ScriptedAgent, here: Path) -> None:
    (here / "data.jsonl").write_bytes(b'{"responses_create_params": {}}\n{"responses_create_params": \n')
    with pytest.raises(CollectionRefused, match=r"data\.jsonl:2: "):
        run(config(agent))
    assert agent.requests == [] and not (here / "out").exists()


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"parallel": 0}, "parallel"),
        ({"repeats": "x"}, "repeats"),
        ({"input": []}, "input"),
        ({"out": "results"}, "<stem>.jsonl"),
        ({"agnet": "x"}, "agnet"),
        ({"environment_server_name": "env"}, "NeMo Gym's names: environment_server_name is environment_server here"),
        ({"num_repeats": 4}, "num_repeats is repeats here"),
    ],
)
def test_a_bad_config_is_a_value_error_naming_the_field(
    agent: ScriptedAgent, changes: dict[str, Any], words: str
) -> None:
    given = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}, **changes}
    with pytest.raises(ValueError, match=words):
        run(given)
    assert agent.requests == []


def test_an_unhealthy_agent_refuses_the_run_before_earlier_results_are_touched(here: Path) -> None:
    """Health checks come before anything is moved aside: a refusal (or a Ctrl-C while a slow
    check runs) leaves the earlier run exactly as it was, and says nothing was moved."""
    with ScriptedAgent() as agent:
        run(config(agent))
    before = {p.name: p.read_bytes() for p in (here / "out").iterdir()}
    with ScriptedAgent(health=Reply(status=503, json={"status": "down"})) as sick:
        with pytest.raises(CollectionRefused, match="failed their health check") as refused, warnings.catch_warnings():
            warnings.simplefilter("error", pytest_rollouts.CollectionWarning)
            run(config(sick))
        assert sick.requests == []
    assert "HTTP 503" in str(refused.value)
    assert {p.name: p.read_bytes() for p in (here / "out").iterdir()} == before
    assert not list(here.glob("out/*.prev-*"))


def test_earlier_results_moved_aside_are_a_warning(agent: ScriptedAgent, here: Path) -> None:
    run(config(agent))
    with pytest.warns(pytest_rollouts.CollectionWarning, match=r"earlier results were moved to .*resume=True") as seen:
        run(config(agent))
    assert [w.filename for w in seen] == [__file__], "from the caller's line, not asyncio's event loop"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_in_run_keeps_the_rows_lets_the_output_go_and_says_so_in_one_line(
    here: Path, stop: signal.Signals
) -> None:
    """Ctrl-C printed Python's traceback (three chained ones before that), and SIGTERM killed the
    script where it stood, its lock left as a killed run's. Both end as the plugin's stops do:
    the rows kept, the output let go, one line, exit 2."""
    with ScriptedAgent(latency=0.3) as agent:
        settings = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}, "parallel": 1}
        script = f"import pytest_rollouts\npytest_rollouts.run({settings!r})\n"
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=here, stderr=subprocess.PIPE, text=True)
        deadline, out = time.monotonic() + 60, here / "out" / "r.jsonl"
        while not (out.exists() and b"\n" in out.read_bytes()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=60)
    assert err.splitlines() == [
        f"interrupted by {stop.name}: the rows written so far are kept in out/r.jsonl; resume=True goes on from them"
    ], err
    assert proc.returncode == 2
    assert (here / "out" / ".r.jsonl.lock").read_bytes() == b"", "released as a run that ended, not a killed one's"
    assert 1 <= len(read_rows(out)) < 6


def test_a_stop_in_run_before_any_row_says_none_is_kept(here: Path) -> None:
    """Stopped during the health check, it said "the rows written so far are kept in out/r.jsonl"
    of a run that sent nothing and has no such file."""
    with ScriptedAgent(health=Reply(json={"status": "ok"}, delay=30)) as agent:
        settings = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}}
        script = f"import pytest_rollouts\npytest_rollouts.run({settings!r})\n"
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=here, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not agent.health_checks and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert agent.requests == []
    assert err.splitlines() == ["interrupted by SIGINT: before any row was written, so none is kept"], err
    assert proc.returncode == 2
    assert not (here / "out" / "r.jsonl").exists()


def test_a_second_ctrl_c_while_it_scores_still_waits_for_the_scoring(here: Path) -> None:
    """A second Ctrl-C is asyncio.run's KeyboardInterrupt, and it cancels every task of the loop,
    the one ``asyncio.to_thread`` makes included: the wait for the scoring thread ended, the run let
    go of its output, and the thread then wrote its metrics file there (over a next run's). Now the
    run waits for the thread, then removes the metrics file, as after one stop."""

    def slow_metrics(body: dict[str, Any]) -> Reply:
        metrics = {"mean/reward": 0.123}
        return Reply(json={"agent_metrics": metrics, "key_metrics": metrics}, delay=1.0)

    with ScriptedAgent(aggregate=slow_metrics) as agent:
        settings = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}}
        script = f"import pytest_rollouts\npytest_rollouts.run({settings!r})\n"
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=here, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not agent.aggregate_bodies and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert not (here / "out" / "r_aggregate_metrics.json").exists(), "written after the run let go of its output"
    assert (here / "out" / ".r.jsonl.lock").read_bytes() == b""


@pytest.mark.parametrize(("changes", "status"), [({"fail_under": 0.9}, 7), ({"require_complete": True}, 6)])
def test_gates_give_the_plugins_exit_status(here: Path, changes: dict[str, Any], status: int) -> None:
    def fails_first(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=400, json={}) if row["_ng_task_index"] == 0 else verifier(row, seen)

    with ScriptedAgent(fails_first) as agent:
        result = run(config(agent, retries=0, **changes))
    assert result.exit_status == status
    assert "EVAL FAILED" in result.summary()


def test_a_second_run_on_the_same_output_is_refused_while_the_first_holds_it(here: Path) -> None:
    async def both(agent: ScriptedAgent) -> None:
        first = asyncio.create_task(run_from_config(config(agent)))
        while not agent.requests:
            await asyncio.sleep(0.01)
        with pytest.raises(CollectionRefused, match=r"r\.jsonl"):
            await run_from_config(config(agent))
        await first

    with ScriptedAgent(latency=0.2) as agent:
        asyncio.run(both(agent))
    assert keys(here / "out" / "r.jsonl") == [(t, 0) for t in range(6)]


@pytest.mark.asyncio
async def test_the_callers_loop_keeps_running_during_the_run() -> None:
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    with ScriptedAgent(latency=0.1) as agent:
        ticker = asyncio.create_task(ticking())
        try:
            await run_from_config(config(agent, parallel=1))
            seen_during = ticks
        finally:
            ticker.cancel()
    # Six rollouts one at a time, each 0.1 s: the ticker ran while they did.
    assert seen_during >= 10


def test_cancelling_the_run_keeps_what_was_written_and_a_resume_completes_it(here: Path) -> None:
    out = here / "out" / "r.jsonl"

    async def cancelled_midway(agent: ScriptedAgent) -> None:
        task = asyncio.create_task(run_from_config(config(agent, parallel=1)))
        # Two rows written, not two replies sent: the agent counts one before its reply is read.
        while not out.exists() or out.read_bytes().count(b"\n") < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    with ScriptedAgent(latency=0.05) as agent:
        asyncio.run(cancelled_midway(agent))
        written = keys(out)
        assert 2 <= len(written) < 6
        sent = len(agent.requests)
        resumed = run(config(agent, resume=True))
        assert not set(agent.keys()[sent:]) & set(written)
    assert resumed.score.coverage.completed == 6


def test_cancelled_while_scoring_it_waits_for_the_scoring_before_letting_the_output_go(here: Path) -> None:
    """Scoring went on in its thread after the cancelled call had returned and released the output,
    and wrote its metrics file later, over whatever the next run there wrote. No metrics file is
    left, as the plugin leaves none when stopped while scoring; the rows are, for a resume."""
    asked, answer = threading.Event(), threading.Event()

    def slow_metrics(body: dict[str, Any]) -> dict[str, Any]:
        asked.set()
        answer.wait(timeout=60)
        return {"agent_metrics": {"mean/reward": 1.0}, "key_metrics": {"mean/reward": 1.0}}

    async def cancelled_while_scoring(agent: ScriptedAgent) -> None:
        task = asyncio.create_task(run_from_config(config(agent)))
        while not asked.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        answer.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Whatever the call left running in a worker thread ends here.
        await asyncio.get_running_loop().shutdown_default_executor()

    with ScriptedAgent(aggregate=slow_metrics) as agent:
        asyncio.run(cancelled_while_scoring(agent))
        assert not (here / "out" / "r_aggregate_metrics.json").exists()
        assert keys(here / "out" / "r.jsonl") == [(t, 0) for t in range(6)]
        resumed = run(config(agent, resume=True))
    assert resumed.score.coverage.completed == 6 and len(agent.requests) == 6
    assert (here / "out" / "r_aggregate_metrics.json").exists()


def test_cancelled_while_exporting_it_leaves_neither_metrics_file_nor_report(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while an export waited on its tracking server, the call left the metrics file and
    the HTML report behind, though a cancelled run leaves no metrics file (docs/python-api.md):
    the report and the export are the run's conclusion as much as scoring is (issue 32, F11)."""
    asked, answer = threading.Event(), threading.Event()
    server = socket.create_server(("127.0.0.1", 0))

    def tracking_server() -> None:  # holds MLflow's first request until the test has cancelled
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                asked.set()
                answer.wait(timeout=60)

    threading.Thread(target=tracking_server, daemon=True).start()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

    async def cancelled_while_exporting(agent: ScriptedAgent) -> None:
        task = asyncio.create_task(run_from_config(config(agent, html="report.html", mlflow="exp")))
        while not asked.is_set():
            await asyncio.sleep(0.01)
        assert (here / "out" / "r_aggregate_metrics.json").exists() and (here / "report.html").exists()
        task.cancel()
        answer.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.get_running_loop().shutdown_default_executor()

    try:
        with ScriptedAgent() as agent:
            asyncio.run(cancelled_while_exporting(agent))
    finally:
        server.close()
    assert not (here / "out" / "r_aggregate_metrics.json").exists()
    assert not (here / "report.html").exists()
    assert keys(here / "out" / "r.jsonl") == [(t, 0) for t in range(6)]


def test_a_run_from_python_imports_neither_pytest_nor_aiohttp(agent: ScriptedAgent) -> None:
    code = (
        "import sys, pytest_rollouts\n"
        "result = pytest_rollouts.run("
        f"{{'input': 'data.jsonl', 'out': 'out/r.jsonl', 'agents': {{'a': {agent.url!r}}}}})\n"
        "print(result.score.coverage.completed)\n"
        "print(sorted(m for m in ('pytest', '_pytest', 'aiohttp') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split("\n")[:2] == ["6", "[]"], done.stdout + done.stderr


def test_shards_run_from_python_merge_into_the_whole_run(agent: ScriptedAgent, here: Path) -> None:
    """Each shard a run of its own (as on separate machines); the merge proves their union whole."""

    for k in range(3):
        run(config(agent, out=f"shards/shard-{k}.jsonl", shard=f"{k}/3", repeats=2))
    shard_keys = [keys(here / "shards" / f"shard-{k}.jsonl") for k in range(3)]
    assert sorted(key for shard in shard_keys for key in shard) == [(t, r) for t in range(6) for r in (0, 1)]
    # A stable hash of the task index: none of these six tasks falls to shard 0, whose run still
    # leaves its (empty) artifacts, as the merge needs them to prove the union whole.
    assert shard_keys[0] == [] and all(shard_keys[1:])
    merged = aggregate(here, "--input", "shards/shard-*.jsonl", "--out", "merged/r.jsonl", "--require-complete")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    whole = run(config(agent, out="whole/r.jsonl", repeats=2))
    [merged_group] = orjson.loads((here / "merged" / "r_aggregate_metrics.json").read_bytes())
    assert merged_group["coverage"] == whole.metrics[0]["coverage"]
    assert merged_group["key_metrics"]["mean/reward"] == whole.mean_reward


def test_a_suite_directory_runs_the_datasets_its_rollouts_toml_declares(agent: ScriptedAgent, here: Path) -> None:
    """As ``pytest DIR`` collects a suite: its declared datasets, routed by its declaration."""
    suite = here / "suite"
    write_rows(suite / "tasks.jsonl", tasks(2))
    write_rows(suite / "notes.jsonl", [{"not": "a dataset"}])
    (suite / "rollouts.toml").write_text(
        f'datasets = ["tasks.jsonl"]\nagent = "policy"\n[agents.policy]\nurl = "{agent.url}"\n'
    )
    result = run(CollectionConfig(input="suite", out="out/r.jsonl"))
    assert result.score.coverage.completed == 2
    assert (
        orjson.loads((here / "out" / "r_run_manifest.json").read_bytes())["datasets"][0]["path"] == "suite/tasks.jsonl"
    )
    with pytest.raises(CollectionRefused, match="no dataset under it is declared"):
        run(CollectionConfig(input="out", out="out2/r.jsonl", agents={"x": agent.url}))


def test_a_run_keeps_no_rollout_outcome_once_its_row_is_written(
    agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory is bounded by what is in flight: by the time the run is scored, every rollout's
    outcome is gone (its row is on disk, its latency a float). Counted structurally, at scoring."""
    alive: list[int] = []
    score = pytest_rollouts.scoring.configured.score_configured

    def counting(*args: Any, **kwargs: Any) -> Any:
        gc.collect()
        alive.append(sum(isinstance(o, RolloutOutcome) for o in gc.get_objects()))
        return score(*args, **kwargs)

    monkeypatch.setattr(pytest_rollouts.scoring.configured, "score_configured", counting)
    result = run(config(agent, repeats=4))
    assert result.score.coverage.completed == 24
    assert alive == [0]
