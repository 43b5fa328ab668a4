"""A stop (Ctrl-C, SIGTERM) while a run's export goes on ends the session promptly, interrupted:
the run's results are on disk before any export starts, and a tracking server that hangs or
keeps failing (which MLflow's client retries for minutes) must not hold the session."""

from __future__ import annotations

import asyncio
import os
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
    assert (pytester.path / "out" / "r_aggregate_metrics.json").is_file()
