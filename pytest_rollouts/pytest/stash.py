"""Stash keys and names the hooks share; a module of its own so inert sessions can check them for free."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_rollouts.pytest.finish import Ending
    from pytest_rollouts.pytest.session import RolloutRun
    from pytest_rollouts.store.runlock import RunLock

RUN_KEY: pytest.StashKey[RolloutRun] = pytest.StashKey()
RUN_ID_KEY: pytest.StashKey[str] = pytest.StashKey()
# Set on a session that holds its output: an xdist controller tells its workers to join it.
HELD_KEY: pytest.StashKey[RunLock] = pytest.StashKey()
# What the session's end decided (its verdict, score, what was put back), for the reporter to render.
ENDING_KEY: pytest.StashKey[Ending] = pytest.StashKey()
# Notices told before the terminal was there to show them (``progress.tell``), shown when the session starts.
NOTICES_KEY: pytest.StashKey[list[str]] = pytest.StashKey()

# The ``workerinput`` key under which the xdist controller hands every worker the same run id.
RUN_ID = "rollouts_run_id"
# ... whether the controller holds the output for them to join (``runlock``)...
RUN_LOCKED = "rollouts_run_locked"
# ... and the ``--dist`` mode, which a worker's own options no longer show.
DIST = "rollouts_dist"
# Why a session stops when its dispatcher failed mid-run; an xdist controller reads it back from
# its workers' stop, to score and gate that run as one process would.
DISPATCH_STOPPED = "dispatch stopped"


class RolloutsWarning(pytest.PytestWarning):
    """Something about the run's files the user must know, e.g. where old results went."""


class Refused(pytest.exit.Exception):
    """Stops the session before any request, as ``pytest.exit`` does; pytest names the exception
    before its message, and this one's name reads as plain words (``Refused: agents failed...``),
    not as ``_pytest.outcomes.Exit``."""

    __module__ = "builtins"
