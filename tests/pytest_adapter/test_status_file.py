"""The live status file ``<out>.status.json``: read while a real session runs against a slow agent,
and after it; one writer under ``-n`` (the controller), with its workers' counts summed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts.store.status import RunStatus, read_status, status_path

from ..agents import Reply, ScriptedAgent, ThrottlingAgent, verifier
from ..helpers import (
    Artifacts,
    new_status,
    pytest_command,
    run_rollouts,
    stop_midway,
    subprocess_run,
    tasks,
    write_rows,
)

ROWS = 24


def failing_task_5(row: dict[str, Any], seen: int) -> Reply:
    if row["_ng_task_index"] == 5:
        return Reply(status=500, raw=b"boom", delay=0.25)
    return verifier(row, seen)


def status_command(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest_rollouts", "status", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)


def watch(proc: subprocess.Popen[bytes], path: Path) -> list[RunStatus]:
    """Every distinct status read while ``proc`` runs (the file is replaced whole: never half read)."""
    seen: list[RunStatus] = []
    while proc.poll() is None:
        new_status(path, seen)
        time.sleep(0.02)
    return seen


def watched_run(cwd: Path, agent_url: str, *options: str) -> tuple[subprocess.Popen[bytes], bytes, list[RunStatus]]:
    """A session writing its status every 50 ms, watched to its end: the process, its output, what was read."""
    command = pytest_command(
        agent_url, "--rollouts-status-interval=0.05", "--rollouts-progress-interval=0.05", *options
    )
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = watch(proc, status_path(cwd / "out" / "r.jsonl"))
    output, _ = proc.communicate(timeout=120)
    return proc, output, seen


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_status_file_while_running_and_after(tmp_path: Path, workers: tuple[str, ...]) -> None:
    write_rows(tmp_path / "data.jsonl", tasks(ROWS))
    with ScriptedAgent(failing_task_5, latency=0.25) as agent:
        proc, output, seen = watched_run(tmp_path, agent.url, "--rollouts-parallel=4", "--rollouts-retries=0", *workers)
    path = status_path(tmp_path / "out" / "r.jsonl")
    assert proc.returncode == 0, output.decode()
    running = [s for s in seen if s.state == "running"]
    assert any(s.in_flight > 0 and s.oldest_in_flight is not None for s in running), seen
    done = [s.done for s in running]
    assert done == sorted(done) and len(set(done)) >= 2, done  # it grows while the run goes
    assert all(s.pid == proc.pid and s.limit == 4 and s.limits == {} for s in running), running
    assert all(s.total == ROWS for s in running if s.done), running
    final = read_status(path)
    files = Artifacts(tmp_path)
    assert final.state == "finished"
    assert final.done == len(files.rows) + len(files.failures) == ROWS
    assert final.failed == {"agent_run_error": 1}
    assert final.in_flight == 0 and final.oldest_in_flight is None and final.eta_s is None
    assert final.pid == proc.pid and not final.writer_gone()
    shown = status_command(tmp_path, "out/r.jsonl")
    assert shown.returncode == 0, shown.stderr
    assert "out/r.jsonl: finished (pid" in shown.stdout
    assert f"done {ROWS}/{ROWS} (100%), failed 1 (1 agent_run_error), in flight 0 (limit 4)" in shown.stdout
    as_json = json.loads(status_command(tmp_path, "out/r.jsonl", "--json").stdout)
    assert as_json["state"] == "finished" and as_json["done"] == ROWS and as_json["stale"] is False


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_under_auto_the_status_says_the_live_limit_not_the_ceiling(tmp_path: Path, workers: tuple[str, ...]) -> None:
    """A throttling agent keeps the adaptive limit far under MAX: the file says that limit (under
    ``-n``, the workers' summed), each agent's, and ``pytest-rollouts status`` prints it."""
    write_rows(tmp_path / "data.jsonl", tasks(60))
    with ThrottlingAgent(capacity=6) as agent:
        proc, output, seen = watched_run(
            tmp_path, agent.url, "--rollouts-parallel=auto:64", "--rollouts-retries=10", *workers
        )
    path = status_path(tmp_path / "out" / "r.jsonl")
    assert proc.returncode == 0, output.decode()
    live = [s for s in seen if s.state == "running" and s.limits]
    assert live, seen
    assert all(set(s.limits) == {"default"} and s.limit == s.limits["default"] < 64 for s in live), live
    final = read_status(path)
    assert final.state == "finished" and final.limit == final.limits["default"] < 64, final
    shown = status_command(tmp_path, "out/r.jsonl")
    assert f"in flight 0 (limit {final.limit}: default {final.limit})" in shown.stdout, shown.stdout


def test_a_killed_run_leaves_a_status_said_to_be_stale(tmp_path: Path) -> None:
    write_rows(tmp_path / "data.jsonl", tasks(ROWS))
    path = status_path(tmp_path / "out" / "r.jsonl")
    with ScriptedAgent(latency=0.5) as agent:
        command = pytest_command(agent.url, "--rollouts-parallel=2", "--rollouts-status-interval=0.05")
        proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (path.exists() and read_status(path).done):
                time.sleep(0.02)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    shown = status_command(tmp_path, "out/r.jsonl")
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "out/r.jsonl: running" in shown.stdout
    assert f"stale: process {proc.pid} is gone and never said the run ended" in shown.stdout


def test_no_status_file_is_a_usage_error(tmp_path: Path) -> None:
    shown = status_command(tmp_path, "out/r.jsonl")
    assert shown.returncode == 4
    assert "out/r.jsonl.status.json: no status file: no run has written one there (yet)" in shown.stderr
    assert not shown.stdout


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_a_bad_status_interval_is_refused_before_anything_is_sent(tmp_path: Path, value: str) -> None:
    write_rows(tmp_path / "data.jsonl", tasks(2))
    with ScriptedAgent() as agent:
        done = subprocess_run(tmp_path, agent.url, f"--rollouts-status-interval={value}")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "--rollouts-status-interval" in done.stderr + done.stdout
    assert agent.requests == [] and agent.health_checks == 0
    assert not (tmp_path / "out").exists()


def test_a_stopped_run_says_so(tmp_path: Path) -> None:
    write_rows(tmp_path / "data.jsonl", tasks(ROWS))
    with ScriptedAgent(latency=0.25) as agent:
        command = pytest_command(agent.url, "--rollouts-parallel=2", "--rollouts-status-interval=0.05")
        status, output = stop_midway(command, tmp_path, tmp_path / "out" / "r.jsonl", signal.SIGINT, rows=4)
    assert status == pytest.ExitCode.INTERRUPTED, output.decode()
    final = read_status(status_path(tmp_path / "out" / "r.jsonl"))
    files = Artifacts(tmp_path)
    assert final.state == "stopped" and final.done == len(files.rows) + len(files.failures) < ROWS
    assert final.in_flight == 0


def test_a_run_whose_dispatch_stopped_says_it_failed(pytester: pytest.Pytester) -> None:
    out = pytester.path / "out" / "r.jsonl"

    def removes_the_output(row: dict[str, Any], seen: int) -> Reply:
        if len(agent.requests) == 4:
            out.unlink()
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(removes_the_output, latency=0.1) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-parallel=2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert read_status(status_path(out)).state == "failed"


def test_a_run_cut_short_by_maxfail_says_it_stopped(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(ROWS))
    with ScriptedAgent(failing_task_5) as agent:
        args = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retries=0", "--rollouts-parallel=1", "-x")
        result = run_rollouts(pytester, *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    final = read_status(status_path(pytester.path / "out" / "r.jsonl"))
    assert final.state == "stopped" and final.done < ROWS
