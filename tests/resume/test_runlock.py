"""One writer per output: a second session is refused before it moves or sends anything, and a
lock a killed run left is taken over, but never while a process of that run still writes."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, keys, pytest_command, subprocess_run, tasks, write_rows


class GatedAgent(ScriptedAgent):
    """Answers the first ``free`` requests, and holds every later one until ``open()``: the run
    is certainly still going while the test does something else."""

    def __init__(self, free: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._free = free
        self._gate = asyncio.Event()

    async def _run(self, request: web.Request) -> web.StreamResponse:
        self._free -= 1
        if self._free < 0:
            await self._gate.wait()
        return await super()._run(request)

    def open(self) -> None:
        self._loop.call_soon_threadsafe(self._gate.set)


def wait_for_rows(out: Path, rows: int) -> None:
    """Until ``rows`` results are written and the run's manifest is final: under ``-n`` each worker
    writes the (same) manifest as it plans, so one can still be rewriting it after another's first
    results are in, and a snapshot taken then would see the first run's own write."""
    manifest = out.with_name(f"{out.stem}_run_manifest.json")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        out.exists()
        and out.read_bytes().count(b"\n") >= rows
        and b'"materialized_digest": null' not in (manifest.read_bytes() if manifest.exists() else b"null")
    ):
        time.sleep(0.05)
    assert out.read_bytes().count(b"\n") >= rows


def snapshot(folder: Path) -> dict[str, bytes]:
    """The folder's files, but for the running session's own passing files: its status file (rewritten
    every few seconds, so a slow second session would see it change; it must still be the first's),
    and the private copy a late xdist worker writes before renaming it into place (``.NAME.PID``)."""
    files = {
        p.name: p.read_bytes()
        for p in sorted(folder.iterdir())
        if p.is_file() and not re.fullmatch(r"\..+\.\d+", p.name)
    }
    status = files.pop("r.jsonl.status.json", None)
    if status is not None:
        files["status's writer"] = str(orjson.loads(status)["pid"]).encode()
    return files


def fails_odd_tasks(row: dict[str, Any], seen: int) -> Reply:
    return Reply(status=500) if row["_ng_task_index"] % 2 else verifier(row, seen)


@pytest.mark.parametrize("mode", ["fresh", "resume", "-n 2"])
def test_a_second_session_on_the_same_output_is_refused_before_it_moves_or_sends_anything(
    pytester: pytest.Pytester, mode: str
) -> None:
    """The lock covered only the preparation: two concurrent resumes both re-sent what was missing
    (keys written twice, both exit 0), and a second fresh run moved the first one's files away."""
    write_rows(pytester.path / "data.jsonl", tasks(24))
    out = pytester.path / "out" / "r.jsonl"
    first_args = ["--rollouts-parallel=2"]
    if mode == "resume":
        with ScriptedAgent(fails_odd_tasks) as broken:
            assert subprocess_run(pytester.path, broken.url).returncode == 0
        first_args.append("--rollouts-resume")
    elif mode == "-n 2":
        first_args += ["-n", "2"]
    second_args = ["--rollouts-resume"] if mode == "resume" else []
    written_before = out.read_bytes().count(b"\n") if out.exists() else 0
    with GatedAgent(free=4) as agent, ScriptedAgent() as other:
        first = subprocess.Popen(pytest_command(agent.url, *first_args), cwd=pytester.path, stdout=subprocess.PIPE)
        try:
            wait_for_rows(out, written_before + 4)
            before = snapshot(out.parent)
            second = subprocess_run(pytester.path, other.url, *second_args)
            assert snapshot(out.parent) == before, "nothing moved, nothing written"
            assert other.requests == [] and other.health_checks == 0, "nothing sent"
        finally:
            agent.open()
            output, _ = first.communicate(timeout=120)
    assert second.returncode == pytest.ExitCode.USAGE_ERROR, second.stdout + second.stderr
    holder = f"pid {first.pid} on {socket.gethostname()}, started "
    assert f"out/r.jsonl is being written by another session ({holder}" in second.stderr, second.stderr
    assert "Wait for it to end, or choose another --rollouts-out" in second.stderr
    assert first.returncode == 0, output.decode()
    artifacts = Artifacts(pytester.path)
    written = keys(artifacts.rows)
    assert sorted(written) == sorted(set(written)) == sorted(keys(artifacts.materialized))


def test_a_killed_xdist_run_is_taken_over_once_its_workers_are_gone_too(pytester: pytest.Pytester) -> None:
    """A controller killed with SIGKILL leaves its workers running (execnet gives them seconds to
    stop), their dispatchers still appending: the output is not free until they are gone. Stopped
    here (SIGSTOP) so they certainly outlive the second session's attempt."""
    write_rows(pytester.path / "data.jsonl", tasks(24))
    out = pytester.path / "out" / "r.jsonl"
    with GatedAgent(free=4) as agent:
        first = subprocess.Popen(
            pytest_command(agent.url, "-n", "2", "--rollouts-parallel=4"),
            cwd=pytester.path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_rows(out, 4)
        workers = children(first.pid)
        assert len(workers) == 2
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        first.kill()
        first.wait()
        try:
            refused = subprocess_run(pytester.path, agent.url, "--rollouts-resume")
        finally:
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
            agent.open()
        assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout + refused.stderr
        holder = f"pid {first.pid} on {socket.gethostname()}, started *"
        gone = "that process is gone, its xdist workers are still finishing"
        assert fnmatch.filter(refused.stderr.splitlines(), f"*({holder}; {gone})*"), refused.stderr
        for pid in workers:
            wait_gone(pid)
        resumed = subprocess_run(pytester.path, agent.url, "--rollouts-resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"out/r.jsonl: took it over from a run that was killed (pid {first.pid} on " in resumed.stdout
    artifacts = Artifacts(pytester.path)
    written = keys(artifacts.rows)
    assert sorted(written) == sorted(set(written)) == sorted(keys(artifacts.materialized))


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (an xdist controller's: its workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_aggregate_neither_overwrites_a_running_run_nor_merges_a_shard_still_being_written(
    pytester: pytest.Pytester,
) -> None:
    """It wrote the merged artifacts over a running run's, and merged a half-written shard as a
    smaller run."""
    write_rows(pytester.path / "data.jsonl", tasks(24))
    with ScriptedAgent() as fast:
        shard = subprocess_run(pytester.path, fast.url, "--rollouts-out=shards/s.jsonl", "--rollouts-shard=0/1")
        assert shard.returncode == 0
    out = pytester.path / "out" / "r.jsonl"

    def aggregate(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pytest_rollouts", "aggregate", *args]
        return subprocess.run(command, cwd=pytester.path, capture_output=True, text=True, timeout=120)

    with GatedAgent(free=4) as agent:
        first = subprocess.Popen(pytest_command(agent.url), cwd=pytester.path, stdout=subprocess.DEVNULL)
        try:
            wait_for_rows(out, 4)
            before = snapshot(out.parent)
            over = aggregate("--input=shards/s.jsonl", "--out=out/r.jsonl")
            assert snapshot(out.parent) == before
            merged = aggregate("--input=out/r.jsonl", "--out=merged/m.jsonl")
        finally:
            agent.open()
            first.communicate(timeout=120)
    holder = f"being written by another session (pid {first.pid} on {socket.gethostname()}, started "
    assert over.returncode == 4 and holder in over.stderr and "choose another --out" in over.stderr, over.stderr
    assert merged.returncode == 4 and holder in merged.stderr, merged.stderr
    assert "choose another --input" in merged.stderr
    assert not (pytester.path / "merged").exists()
    assert first.returncode == 0
