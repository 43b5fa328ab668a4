"""Running the plugin the way users do: a pytest session over a dataset, against a real server."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from pytest_rollouts import cli
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.dispatch.channel import Dispatcher
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.rows.planned import PlannedRollout, PlannedRollouts
from pytest_rollouts.store.status import RunStatus, StatusError, read_status

QUIET = ("-p", "no:cacheprovider", "-p", "no:asyncio")


def run_rollouts(pytester: pytest.Pytester, *args: str, out: str = "out/r.jsonl") -> pytest.RunResult:
    """An in-process pytest session writing rollouts to ``out`` (the cache is off: no state leaks)."""
    return pytester.runpytest(*QUIET, f"--rollouts-out={out}", *args)


def subprocess_run(cwd: Path, agent_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A rollouts session in a child process (for exit codes and signals), writing ``out/r.jsonl``."""
    return subprocess.run(pytest_command(agent_url, *args), cwd=cwd, capture_output=True, text=True, timeout=120)


def pytest_command(agent_url: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        *QUIET,
        "data.jsonl",
        f"--rollouts-agent={agent_url}",
        "--rollouts-out=out/r.jsonl",
        "--rollouts-retry-backoff=0.01",
        *args,
    ]


class Artifacts:
    """The four files of a run, read back as rows."""

    def __init__(self, root: Path, out: str = "out/r.jsonl") -> None:
        self.out = root / out
        stem = self.out.with_suffix("")
        self.failures_path = Path(f"{stem}_failures.jsonl")
        self.materialized_path = Path(f"{stem}_materialized_inputs.jsonl")

    @property
    def rows(self) -> list[dict[str, Any]]:
        return read_rows(self.out)

    @property
    def failures(self) -> list[dict[str, Any]]:
        return read_rows(self.failures_path)

    @property
    def materialized(self) -> list[dict[str, Any]]:
        return read_rows(self.materialized_path)


def keys(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows]


def file_size_limit(size: int) -> Callable[[], None]:
    """A ``preexec_fn``: the process and its children may write files of at most ``size`` bytes;
    a write past it fails (EFBIG) the way a full disk does, instead of killing the writer."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def stop_midway(command: list[str], cwd: Path, out: Path, stop: int, rows: int = 8) -> tuple[int, bytes]:
    """Run a pytest session in a child process and send it ``stop`` once ``out`` holds ``rows`` rows;
    its exit status and output."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while (not out.exists() or out.read_bytes().count(b"\n") < rows) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(stop)
    output, _ = proc.communicate(timeout=60)
    return proc.returncode, output


def plan_header(**changes: Any) -> PlanHeader:
    """A dispatcher plan's header for one agent ``a``, with ``changes`` to its fields."""
    fields: dict[str, Any] = {
        "urls": {"a": "http://127.0.0.1:9"},
        "agents": ["a"],
        "bodies": "m.jsonl",
        "out": "r.jsonl",
        "failures": "f.jsonl",
        "parallel": 1,
        "limit": 1,
        "timeout": 10.0,
        "retries": 0,
        "retry_backoff": 0.0,
        "max_attempts": 1,
        "budget": None,
        "margin": None,
        "shared_output": False,
        "headers": {},
        "health": None,
        "models": {},
        "model_timeout": 600.0,
        "model_parallel": 1,
    }
    return PlanHeader(**{**fields, **changes})


def one_rollout_plan(tmp_path: Path, rows: list[bytes]) -> tuple[Path, PlannedRollouts]:
    """``rows`` (request bodies) written as the materialized inputs ``m.jsonl``, and a plan of one
    rollout of one task each, on agent ``a``."""
    bodies = tmp_path / "m.jsonl"
    bodies.write_bytes(b"".join(row + b"\n" for row in rows))
    offsets = [sum(len(row) + 1 for row in rows[:i]) for i in range(len(rows))]
    return bodies, PlannedRollouts(PlannedRollout(i, i, 0, "a", offsets[i], len(rows[i])) for i in range(len(rows)))


def one_rollout_dispatcher(
    tmp_path: Path,
    rows: list[bytes],
    agent_url: str,
    parallel: int | str,
    process: subprocess.Popen[bytes] | None = None,
    **settings: Any,
) -> Dispatcher:
    """A dispatcher for ``one_rollout_plan``'s plan, writing ``r.jsonl`` and ``f.jsonl``, health checks
    off, with ``settings`` (``retries=3``, ...); ``parallel`` as the option takes it; not started."""
    bodies, plan = one_rollout_plan(tmp_path, rows)
    given = Settings.model_validate({"no_health_check": True, "parallel": parallel, **settings})
    return Dispatcher(
        plan,
        len(plan),
        {"a": agent_url},
        (bodies, tmp_path / "r.jsonl", tmp_path / "f.jsonl"),
        given,
        parallel=int(given.parallel),
        process=process,
    )


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def tasks(n: int) -> list[dict[str, Any]]:
    """``n`` rows for ``agents.verifier``: every third one answered wrong."""
    return [
        {
            "responses_create_params": {"input": f"q{i}"},
            "expected_answer": str(i),
            "answer": str(i) if i % 3 else "wrong",
        }
        for i in range(n)
    ]


def aggregate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``pytest-rollouts aggregate`` in ``cwd``: its exit status, and what it wrote to stdout and stderr.

    It runs ``cli.main``, what the console script and ``python -m pytest_rollouts`` run, in this
    process: a child process each time cost the merge tests most of their time, and nothing they
    check is the process's (the entry point as a process is tests/resume's: test_runlock.py,
    test_run_files_kept.py). An exception that gets out is a traceback on stderr and status 1, as a
    process would show it.
    """
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = _main_status(["aggregate", *args])
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["pytest-rollouts", "aggregate", *args], status, out.getvalue(), err.getvalue())


def _main_status(argv: list[str]) -> int:
    """``cli.main``'s exit status as ``sys.exit`` would make it, a traceback printed for an exception."""
    try:
        return cli.main(argv)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1


def new_status(path: Path, seen: list[RunStatus]) -> RunStatus | None:
    """The status file at ``path`` when it changed since the last of ``seen`` (appended to it), else
    None. A reader never finds half a file: it is replaced whole."""
    try:
        status = read_status(path)
    except StatusError:
        return None
    if seen and status.updated_at == seen[-1].updated_at:
        return None
    seen.append(status)
    return status


def port(url: str) -> int:
    """The port of a server's ``url``, for a config that names host and port apart."""
    number = urlsplit(url).port
    assert number is not None
    return number


def embedded(page: bytes, element: str) -> Any:
    """The JSON of the page's ``<script type="application/json" id=...>``, as the browser reads it."""
    match = re.search(rb'<script type="application/json" id="' + element.encode() + rb'">(.*?)</script>', page, re.S)
    assert match is not None
    return json.loads(match.group(1))


def dispatchers_of(parent: int) -> list[int]:
    """The dispatcher processes ``parent`` started that still run (a reaped one is gone from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
        if ppid == parent and b"pytest_rollouts.dispatch.engine" in command:
            found.append(int(stat.parent.name))
    return found
