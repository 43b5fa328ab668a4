"""The dispatcher process: start it, and stop one that never got a plan.

Its messages and its end after a plan are the channel's (``channel.py``); this is only the
process, started early so its imports overlap with pytest's collection.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLOSE_TIMEOUT_S = 60.0


def spawn_engine() -> subprocess.Popen[bytes]:
    """Start the dispatcher process; it starts up while pytest is still collecting.

    It imports this package from wherever pytest did, installed or not. It gets a process group
    of its own, so the terminal's Ctrl-C reaches pytest alone: pytest decides when dispatch
    stops, and a signal landing while the interpreter starts up would kill it with a fatal error
    instead. It ends with its input, whatever ends pytest.
    """
    here = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH"))))}
    command = [sys.executable, "-m", "pytest_rollouts.dispatch.engine"]
    # Unbuffered: pytest reads the engine's messages with ``os.read`` on the descriptor and
    # frames them itself, so a buffer in front of it would only go unused.
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0, process_group=0)


def stop_unused(process: subprocess.Popen[bytes]) -> None:
    """An engine that never got a plan has nothing to write: killed, not waited on (it may still be
    importing, a tenth of a second before it would read the end of its input)."""
    assert process.stdin is not None and process.stdout is not None
    process.kill()
    process.wait()
    process.stdin.close()
    process.stdout.close()


def exit_status(proc: subprocess.Popen[bytes]) -> str:
    """Its pipe closed; the process itself may take a moment more to end."""
    try:
        code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return "still running"
    return f"killed by signal {-code}" if code < 0 else f"code {code}"
