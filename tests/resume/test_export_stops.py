"""A stop (Ctrl-C, SIGTERM) while a run's export goes on ends the session promptly, interrupted:
the run's results are on disk before any export starts, and a tracking server that hangs or
keeps failing (which MLflow's client retries for minutes) must not hold the session."""

from __future__ import annotations

import asyncio
import fcntl
import os
import select
import signal
from pathlib import Path

import pytest
from aiohttp import web

from ..agents import AppServer, ScriptedAgent
from ..helpers import pytest_command, read_rows, tasks, write_rows
from .stops import assert_no_traceback, finish, session, wait_for


class TrackingServer(AppServer):
    """An experiment tracker on loopback that never answers (``hang``) or always fails (503)."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.requests: list[str] = []
        super().__init__()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        return app

    async def _any(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        if self.hang:
            await asyncio.sleep(3600)
        return web.Response(status=503, text="unavailable")


def tracked_by(destination: str, tracker: TrackingServer, home: Path) -> dict[str, str]:
    """The environment that sends ``destination``'s client to ``tracker``, and nowhere else."""
    if destination == "mlflow":
        return {**os.environ, "MLFLOW_TRACKING_URI": tracker.url}
    folders = {name: home / name for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR")}
    for folder in folders.values():
        folder.mkdir()
    return {
        **os.environ,
        **{name: str(folder) for name, folder in folders.items()},
        "WANDB_BASE_URL": tracker.url,
        "WANDB_API_KEY": "0" * 40,
        "WANDB_MODE": "online",
    }


@pytest.mark.parametrize("destination", ["mlflow", "wandb"])
@pytest.mark.parametrize("hang", [True, False], ids=["hangs", "fails"])
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_an_export_ends_the_session_interrupted(
    pytester: pytest.Pytester, tmp_path: Path, stop: int, hang: bool, destination: str
) -> None:
    """It was held until MLflow's retries ran out (minutes), and the session then exited 0."""
    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent() as agent, TrackingServer(hang) as tracker:
        env = tracked_by(destination, tracker, tmp_path)
        command = pytest_command(agent.url, f"--rollouts-{destination}=evals")
        with session(pytester.path, command, env) as proc:
            wait_for(lambda: bool(tracker.requests), "a request to the tracking server")
            os.killpg(proc.pid, stop)
            out, err = finish(proc)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert f"Interrupted while exporting to {destination} ('evals')" in out, out
    assert_no_traceback(out, err)
    assert len(read_rows(pytester.path / "out" / "r.jsonl")) == 4
    # One rule for a stop while the run is published, as the Python API keeps it: the conclusions go.
    assert "no metrics file written; --rollouts-resume scores the run" in out, out
    assert not (pytester.path / "out" / "r_aggregate_metrics.json").exists()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_report_is_written_ends_the_session_interrupted(pytester: pytest.Pytester, stop: int) -> None:
    """With no export asked, a stop while the HTML report was written was held and never taken:
    the session went on writing and exited 0. The report goes into a pipe that a reader opened and
    never drains (4 KiB of room), so the session is held inside the write when the stop comes."""
    write_rows(pytester.path / "data.jsonl", tasks(4))
    fifo = pytester.path / "report.html"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.fcntl(reader, fcntl.F_SETPIPE_SZ, 4096)
        waiting = select.poll()
        waiting.register(reader, select.POLLIN)
        with ScriptedAgent() as agent:
            with session(pytester.path, pytest_command(agent.url, f"--rollouts-html={fifo}")) as proc:
                wait_for(lambda: bool(waiting.poll(0)), "the report's first bytes")
                os.killpg(proc.pid, stop)
                out, err = finish(proc)
    finally:
        os.close(reader)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "Interrupted while writing the report: no metrics file written; --rollouts-resume scores the run" in out
    assert_no_traceback(out, err)
    assert len(read_rows(pytester.path / "out" / "r.jsonl")) == 4, "every row stays"
    assert not (pytester.path / "out" / "r_aggregate_metrics.json").exists()
    assert fifo.exists(), "what is not a file the run wrote is left alone"
