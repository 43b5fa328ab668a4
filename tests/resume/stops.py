"""Driving a pytest session the way a shell and a user do, to stop it: a process group of its own
(what Ctrl-C at a terminal signals), a bound on how long it may take to end, and what an orderly
end must not print."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Longer than any prompt stop takes, far shorter than what a hang would: a session still running
# then has hung.
BOUND_S = 45


@contextmanager
def session(cwd: Path, command: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A pytest session in a process group of its own, as a shell runs a job: a signal to the group
    is what Ctrl-C at a terminal sends. Whatever is left of it at the end is killed."""
    # Unbuffered: a test reading lines as they come leaves nothing in a buffer ``communicate`` skips.
    proc = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env, bufsize=0
    )
    try:
        yield proc
    finally:
        for pid in engines(cwd):
            kill_quietly(pid, signal.SIGCONT)
            kill_quietly(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def engines(cwd: Path) -> list[int]:
    path = cwd / "engine.pid"
    return [int(path.read_text())] if path.exists() and path.read_text() else []


def kill_quietly(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def finish(proc: subprocess.Popen[bytes]) -> tuple[str, str]:
    """Its output once it ended; a session still running after ``BOUND_S`` has hung."""
    try:
        out, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the session did not end within {BOUND_S} s of the stop")
    return out.decode(), err.decode()


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def assert_no_traceback(*texts: str) -> None:
    for text in texts:
        for mark in ("Traceback", "Fatal Python error", "a bug in the dispatcher", "INTERNALERROR"):
            assert mark not in text, text
