"""The live status file beside a run's output, ``<out>.status.json``: its shape, writing and reading.

A long run is otherwise visible only in its terminal. This file is replaced whole every few seconds
while the run goes (a reader sees the previous file or the next, never half of one) and once more
when it ends, with how it ended; ``pytest-rollouts status OUT`` reads it. It is a view, not an
artifact: nothing reads it back to resume or score, so it is not fsynced (a crash leaves at worst
the previous view, whose writer is then gone, which the reader says).

``RunStatus`` is not frozen: every run's session builds the type as it starts, and a frozen
dataclass costs nearly twice as much to build (``docs/performance.md``); its fields hold dicts, so it
was never hashable, and a status is made whole and written, never changed.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import field
from pathlib import Path
from typing import Any

import orjson

from pytest_rollouts.datatype import datatype
from pytest_rollouts.store.runlock import alive

SUFFIX = ".status.json"
RUNNING = "running"
FINISHED = "finished"
STOPPED = "stopped"
FAILED = "failed"
STATES = (RUNNING, FINISHED, STOPPED, FAILED)


def status_path(out: Path) -> Path:
    """Where the status of the run writing ``out`` goes: ``<out>.status.json``."""
    return out.with_name(out.name + SUFFIX)


@datatype
class OldestInFlight:
    """The request that has waited longest: its age in seconds, and its rollout's task and index."""

    age_s: float
    task: int
    rollout: int


@datatype
class RunStatus:
    """What the file says. ``total`` and ``done`` count the rollouts this session dispatches (a resume's
    settled ones are not among them); ``failed`` counts those of them that failed, by class (a result
    without a reward is ``no_reward``, as the live line counts it); ``limit`` is the concurrency limit
    dispatch keeps now: a fixed ``parallel``, or under ``auto:MAX`` the sum of ``limits``, each agent's
    adaptive limit now (summed over xdist workers; empty under a fixed ``parallel``). ``rate_per_s``
    is over the last minute; ``eta_s`` is None while no rate is known."""

    state: str
    out: str
    pid: int
    host: str
    started_at: float
    updated_at: float
    interval_s: float
    total: int
    done: int
    failed: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    oldest_in_flight: OldestInFlight | None = None
    limit: int = 0
    limits: dict[str, int] = field(default_factory=dict)
    rate_per_s: float | None = None
    eta_s: float | None = None

    def writer_gone(self) -> bool:
        """The run says it is running, but its writer's process is gone (killed, or its host's pid
        table says so): the file is stale. Another host's process cannot be asked: never gone."""
        return self.state == RUNNING and self.host == socket.gethostname() and not alive(self.pid)

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class StatusError(ValueError):
    """The status file is missing or is not one this version writes."""


def write_status(path: Path, status: RunStatus) -> None:
    """Replace ``path`` with ``status`` in one rename; the private file is this process's."""
    private = path.with_name(f".{path.name}.{os.getpid()}")
    private.write_bytes(orjson.dumps(status, option=orjson.OPT_INDENT_2) + b"\n")
    os.replace(private, path)


def read_status(path: Path) -> RunStatus:
    """The status at ``path``; ``StatusError`` saying why when there is none to read."""
    try:
        raw = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise StatusError(f"{path}: no status file: no run has written one there (yet)") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise StatusError(f"{path}: not a status file: {exc}") from None
    try:
        oldest = raw.get("oldest_in_flight")
        status = RunStatus(**{**raw, "oldest_in_flight": None if oldest is None else OldestInFlight(**oldest)})
    except (AttributeError, TypeError) as exc:
        raise StatusError(f"{path}: not a status file: {exc}") from None
    if status.state not in STATES:
        raise StatusError(f"{path}: not a status file: unknown state {status.state!r}")
    return status
