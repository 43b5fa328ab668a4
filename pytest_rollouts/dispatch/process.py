"""The dispatcher process: start it, ask it the agents' health, stop one that never got a plan,
and end one that did.

Its messages and its end after a plan are the channel's (``channel.py``); this is only the
process, started early so its imports overlap with pytest's collection.
"""

from __future__ import annotations

import math
import os
import select
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from pytest_rollouts.config.bounds import HEALTH_CHECK_S
from pytest_rollouts.dispatch.frames import ChannelClosed, ChannelStuck, FrameBuffer, next_frame, write_all
from pytest_rollouts.dispatch.messages import (
    CheckHealth,
    Fatal,
    HealthChecked,
    MessageError,
    PlanHeader,
    decode,
    encode,
    resolve,
)

CLOSE_TIMEOUT_S = 60.0
# How long the end of the dispatcher's output is waited for once its input is closed (it exits in ms).
EXIT_SEEN_S = 1.0
# What the dispatcher process may take to start (its imports: a tenth of a second, seconds on a
# loaded machine or a cold disk) before its health checks' own bound counts.
START_LIMIT_S = 60.0


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


class HealthUnasked(RuntimeError):
    """The dispatcher process failed or went away while it checked the agents: nothing was sent."""


def ask_health(process: subprocess.Popen[bytes], header: PlanHeader) -> list[str]:
    """One line per agent of ``header`` that fails its ``/health``, as the dispatcher process
    (started, no plan yet) checks them: it has the event loop and HTTP client loaded already.

    Each agent's check is bounded there (``dispatch/health.py``), and the answer here: a process
    that died is ``HealthUnasked`` at once, one that gives no answer (stopped, or stuck in the
    kernel) once ``answer_limit_s`` passed. Ctrl-C (and SIGTERM, as a session turns it into one)
    ends the wait too."""
    assert process.stdin is not None and process.stdout is not None
    limit = answer_limit_s(header)
    try:
        # The process takes its input once it has started, however many agents it is to check.
        write_all(process.stdin.fileno(), encode(CheckHealth(header)), START_LIMIT_S)
        resolve()  # while the agents are checked
        reply = decode(next_frame(process.stdout.fileno(), FrameBuffer(), deque(), time.monotonic() + limit))
    except (TimeoutError, ChannelStuck):  # stopped or stuck: it took nothing, or answered nothing
        raise HealthUnasked(
            f"the dispatcher process (pid {process.pid}) gave no answer to the agents' health check in "
            f"{limit:g}s: it is stopped or stuck; nothing was sent"
        ) from None
    except (ChannelClosed, OSError):
        raise HealthUnasked(
            f"the dispatcher process exited while it checked the agents' health ({exit_status(process)}); "
            "nothing was sent"
        ) from None
    if isinstance(reply, Fatal):
        raise HealthUnasked(f"the dispatcher process failed while it checked the agents' health: {reply.why}")
    if not isinstance(reply, HealthChecked):
        raise MessageError(f"message {reply.tag!r} is not the answer to a health check")
    return reply.unhealthy


def answer_limit_s(header: PlanHeader) -> float:
    """How long a health check's answer may take: the process's start, then its checks, ``workers``
    at once, each bounded by ``HEALTH_CHECK_S`` (a second more each, for what surrounds it)."""
    rounds = 0 if header.health is None else math.ceil(len(header.agents) / header.health.workers)
    return START_LIMIT_S + rounds * (HEALTH_CHECK_S + 1.0)


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


def end_process(process: subprocess.Popen[bytes], *, stuck: bool = False) -> str:
    """Close its input, which ends it, and wait for it to exit (killed after ``CLOSE_TIMEOUT_S``, or
    at once when ``stuck``); why it did not, or ""."""
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.close()
        try:
            process.wait(timeout=0 if stuck else _exit_seen(process))
        except subprocess.TimeoutExpired:
            process.kill()
            try:  # blocked in the kernel (a hung mount), it ignores even SIGKILL until the I/O returns
                process.wait(timeout=CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return f"the dispatcher process (pid {process.pid}) did not exit, even when killed"
        return ""
    finally:
        process.stdout.close()


def _exit_seen(process: subprocess.Popen[bytes]) -> float:
    """Wait for the process's exit as the kernel tells it, so that it is seen at once, where ``wait``
    polls in doubling sleeps (up to 15 ms past a quick exit); how long ``wait`` may still take.

    A pidfd (Linux) wakes at the exit itself, bounded by ``CLOSE_TIMEOUT_S``. Elsewhere the end of
    its output, which comes as it exits: but a process it started may hold that output open, so
    only for ``EXIT_SEEN_S``, and ``wait`` then polls."""
    assert process.stdout is not None
    if process.returncode is not None:  # reaped already: its pid may be another process's by now
        return 0.0
    poller = select.poll()  # not select: a caller holding over 1024 descriptors (a trainer) is no error
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd: not Linux, or before 5.3
        poller.register(process.stdout.fileno(), select.POLLIN)
        poller.poll(EXIT_SEEN_S * 1000)
        return CLOSE_TIMEOUT_S
    try:
        poller.register(pidfd, select.POLLIN)
        poller.poll(CLOSE_TIMEOUT_S * 1000)
    finally:
        os.close(pidfd)
    return 0.0
