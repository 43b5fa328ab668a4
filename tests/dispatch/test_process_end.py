"""``end_process``: a dispatcher process ended by closing its input, seen to exit through a pidfd or,
without one (not Linux), through the end of its output; one that does not exit is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from pytest_rollouts.dispatch import process as process_module
from pytest_rollouts.dispatch.process import end_process

# Exits once its input ends, as the dispatcher does.
ENDS_WITH_INPUT = "import sys; sys.stdin.buffer.read()"
# Leaves a grandchild holding its output (a process the dispatcher started), then exits with its input.
LEAVES_A_GRANDCHILD = (
    "import subprocess, sys; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print(child.pid, flush=True); sys.stdin.buffer.read()"
)
# Ignores the end of its input.
NEVER_ENDS = "import time; time.sleep(60)"


@pytest.fixture(params=["pidfd", "no pidfd"])
def pidfd(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both ways of seeing the exit: Linux's pidfd, and the end of the output elsewhere."""
    if request.param == "no pidfd":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    yield request.param


def _started(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)


def test_a_process_that_ends_with_its_input_exits_by_itself(pidfd: str) -> None:
    process = _started(ENDS_WITH_INPUT)
    assert end_process(process) == ""
    assert process.returncode == 0


def test_a_grandchild_holding_the_output_does_not_get_the_process_killed(pidfd: str) -> None:
    process = _started(LEAVES_A_GRANDCHILD)
    assert process.stdout is not None
    grandchild = int(process.stdout.readline())
    try:
        assert end_process(process) == ""
        assert process.returncode == 0
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_a_process_that_ignores_its_input_ending_is_killed(pidfd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_module, "CLOSE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(process_module, "EXIT_SEEN_S", 0.2)
    process = _started(NEVER_ENDS)
    assert end_process(process) == ""
    assert process.returncode == -signal.SIGKILL
