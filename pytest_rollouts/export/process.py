"""An export in a process of its own, which a stop ends at once.

Tracking clients wait on their server in ways a stop cannot cut short in the process that calls
them: MLflow's retries a server that hangs or fails for minutes, and W&B's own service process,
which its exit hook waits for, goes on for as long as its uploads do. In a child process (its
own session, so the terminal's Ctrl-C reaches the run alone), the run kills the whole process
group and is done. The child also keeps what both libraries leave in a process that imports
them (W&B's service, MLflow's tracing setup) out of a caller's own.

The export goes to the child on its stdin as JSON; its reply, on its stdout, is a JSON object:
``{"logged": where}`` or ``{"failed": why}``. What the libraries print goes to its stderr, shown
only for a child that died without a reply.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from pytest_rollouts.export.contents import RunExport


class ExportFailed(Exception):
    """The child's export failed: its error, as the child told it."""


def export_in_process(name: str, target: str, export: RunExport) -> str:
    """``export`` logged to ``name`` (``wandb``, ``mlflow``) at ``target`` by a child process: where
    it went. ``ExportFailed`` says why it did not; a stop (``KeyboardInterrupt``) kills the child."""
    here = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH"))))}
    command = [sys.executable, "-m", "pytest_rollouts.export.process", name, target]
    child = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    try:
        reply, errors = child.communicate(orjson.dumps(_as_json(export)))
    except BaseException:
        _kill_group(child)
        raise
    try:
        told = orjson.loads(reply)
    except orjson.JSONDecodeError:
        last = errors.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise ExportFailed(f"the export process exited with status {child.returncode}: {last[0]}") from None
    if "failed" in told:
        raise ExportFailed(told["failed"])
    return str(told["logged"])


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """The child and whatever it started in its group, at once: the stop was meant to end the wait."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def _as_json(export: RunExport) -> dict[str, Any]:
    return {
        "name": export.name,
        "metrics": export.metrics,
        "coverage": export.coverage,
        "params": export.params,
        # A path's bytes as they are (one not UTF-8 too), one character each.
        "files": [os.fsencode(path).decode("latin-1") for path in export.files],
    }


def _from_json(data: dict[str, Any]) -> RunExport:
    files = [Path(os.fsdecode(path.encode("latin-1"))) for path in data["files"]]
    return RunExport(data["name"], data["metrics"], data["coverage"], data["params"], files)


def main() -> None:
    """The child: one export, its reply on what was stdout (the libraries' prints go to stderr)."""
    reply = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    name, target = sys.argv[1:3]
    export = _from_json(orjson.loads(sys.stdin.buffer.read()))
    if name == "wandb":
        from pytest_rollouts.export.to_wandb import log_to_wandb as log
    else:
        from pytest_rollouts.export.to_mlflow import log_to_mlflow as log
    try:
        told = {"logged": log(target, export)}
    except Exception as exc:  # any failure of a foreign library: told, as it is, to the run
        told = {"failed": f"{type(exc).__name__}: {exc}"}
    reply.write(orjson.dumps(told))
    reply.close()


if __name__ == "__main__":
    main()
