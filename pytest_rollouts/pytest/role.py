"""What this pytest process is to a run, decided once at configure, as xdist decides it: a single
session (collects, dispatches, scores), an xdist controller (collects nothing, dispatches nothing,
holds the output for its workers, hears them and scores), or an xdist worker (collects and
dispatches its share under its controller's run id, owns nothing of the whole run).

The role object is registered (as ``rollouts-role``) when pytest configures, and everything asks
it instead of probing pytest's config (``workerinput``, ``numprocesses``, ``dsession``) on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_rollouts.pytest.stash import DIST, RUN_ID, RUN_LOCKED

ROLE_KEY: pytest.StashKey[Role] = pytest.StashKey()
SINGLE, CONTROLLER, WORKER = "single", "controller", "worker"


@dataclass(frozen=True, eq=False)  # a plugin: registered and found by identity
class Role:
    name: str
    # What an xdist worker's controller handed it (empty elsewhere).
    workerinput: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, config: pytest.Config) -> Role:
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            return cls(WORKER, workerinput)
        return cls(CONTROLLER if config.getoption("numprocesses", None) else SINGLE)

    @property
    def worker(self) -> bool:
        return self.name == WORKER

    @property
    def controller(self) -> bool:
        return self.name == CONTROLLER

    @property
    def dispatches(self) -> bool:
        """It sends rollouts itself: not a controller, whose workers do."""
        return self.name != CONTROLLER

    @property
    def owns_run(self) -> bool:
        """It decides for the whole run (puts files back, scores, tells the user): not a worker."""
        return self.name != WORKER

    @property
    def run_id(self) -> str | None:
        """The run id a worker's controller handed it; None elsewhere (the session makes one)."""
        return self.workerinput.get(RUN_ID)

    @property
    def joins_lock(self) -> bool:
        """A worker whose controller holds the output for it (else its workers share it among themselves)."""
        return bool(self.workerinput.get(RUN_LOCKED))

    @property
    def dist(self) -> str:
        """A worker's ``--dist`` mode, which its own options no longer show."""
        return str(self.workerinput.get(DIST, "no"))

    def share(self, parallel: int) -> int:
        """This process's part of a run-wide concurrency: a worker's exact split, remainder first."""
        if not self.worker:
            return parallel
        count = int(self.workerinput.get("workercount", 1))
        index = int(str(self.workerinput.get("workerid", "gw0")).removeprefix("gw") or 0)
        return max(1, parallel // count + (1 if index < parallel % count else 0))


def decide_role(config: pytest.Config) -> Role:
    """The role, decided and registered once, at configure."""
    role = Role.of(config)
    config.stash[ROLE_KEY] = role
    config.pluginmanager.register(role, "rollouts-role")
    return role


def role(config: pytest.Config) -> Role:
    """This process's role (decided at configure; a config that never configured is a single session)."""
    found = config.stash.get(ROLE_KEY, None)
    return found if found is not None else Role.of(config)
