"""What this pytest process is to a run, decided once at configure, as xdist decides it: a single
session (collects, dispatches, scores), an xdist controller (collects nothing, dispatches nothing,
holds the output for its workers, hears them and scores), or an xdist worker (collects and
dispatches its share under its controller's run id, owns nothing of the whole run).

The role object is registered (as ``rollouts-role``) when pytest configures, and everything asks
it instead of probing pytest's config (``workerinput``, ``workeroutput``, ``numprocesses``,
``dsession``) on its own. As xdist's own plugins do, the controller's object implements the
controller's xdist hooks (handing each worker its part, hearing a worker that went down): a
process in another role never has them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

import pytest

from pytest_rollouts.datatype import datatype
from pytest_rollouts.pytest.stash import DIST, HELD_KEY, RUN_ID, RUN_ID_KEY, RUN_KEY, RUN_LOCKED

ROLE_KEY: pytest.StashKey[Role] = pytest.StashKey()
SINGLE, CONTROLLER, WORKER = "single", "controller", "worker"
# The ``workeroutput`` keys under which an xdist worker tells its controller why its dispatch
# stopped, what it did with the files (``Workers.report``), and why it refused the run before any
# request (while collecting or preparing), with the exit status one process gives for it.
DISPATCH_FAILURE = "rollouts_dispatch_failure"
WORKER_REPORT = "rollouts_worker_report"
REFUSAL = "rollouts_refusal"
# On a controller, the first refusal a worker told; also where no rollouts option made it a run.
REFUSAL_KEY = pytest.StashKey[tuple[str, int]]()


@datatype(frozen=True, eq=False)  # a plugin: registered and found by identity
class Role:
    """What this process is in the run: one process alone, an xdist controller or one of its workers."""

    name: str
    # What an xdist worker's controller handed it (empty elsewhere).
    workerinput: Mapping[str, Any] = field(default_factory=dict)
    # Where an xdist worker leaves its news for its controller (None elsewhere).
    workeroutput: dict[str, Any] | None = None

    @classmethod
    def of(cls, config: pytest.Config) -> Role:
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            return cls(WORKER, workerinput, getattr(config, "workeroutput", None))
        return Controller(CONTROLLER) if config.getoption("numprocesses", None) else cls(SINGLE)

    def tell_controller(self, news: Mapping[str, Any]) -> None:
        """An xdist worker's news, which its controller hears when the worker goes down; nowhere else."""
        if self.workeroutput is not None:
            self.workeroutput.update(news)

    def stopped_by(self, config: pytest.Config) -> object:
        """What stopped an xdist controller's session (its ``dsession``'s reason); None elsewhere."""
        return None

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

    @property
    def worker_id(self) -> str:
        """A worker's xdist id (``gw0``...), which labels its dispatchers' account; empty elsewhere."""
        return str(self.workerinput.get("workerid", ""))

    def share(self, parallel: int) -> int:
        """This process's part of a run-wide concurrency: a worker's exact split, remainder first."""
        if not self.worker:
            return parallel
        count = int(self.workerinput.get("workercount", 1))
        index = int(str(self.workerinput.get("workerid", "gw0")).removeprefix("gw") or 0)
        return max(1, parallel // count + (1 if index < parallel % count else 0))


class Controller(Role):
    """An xdist controller: the xdist hooks only a controller gets, as a plugin of its own."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Give every worker the same run id (files are prepared once), the hold on the output to
        join, and the dist mode."""
        import uuid

        config = node.config
        node.workerinput[RUN_ID] = config.stash.setdefault(RUN_ID_KEY, uuid.uuid4().hex)
        node.workerinput[RUN_LOCKED] = HELD_KEY in config.stash
        node.workerinput[DIST] = config.getoption("dist")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """What a worker that went down said of its part, and why its dispatch stopped (the
        controller's section repeats it), or why it refused the run."""
        config, output = node.config, getattr(node, "workeroutput", {})
        if output.get(REFUSAL):
            why, code = output[REFUSAL]
            config.stash.setdefault(REFUSAL_KEY, (why, code))
        run = config.stash.get(RUN_KEY, None)
        if run is None:
            return
        run.workers.hear(output.get(WORKER_REPORT))
        failure = output.get(DISPATCH_FAILURE)
        if failure and not run.dispatch_failure:
            run.dispatch_failure = failure

    def stopped_by(self, config: pytest.Config) -> object:
        return getattr(config.pluginmanager.get_plugin("dsession"), "shouldstop", None)


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


def refused_by_workers(config: pytest.Config) -> tuple[str, int] | None:
    """On an xdist controller: why its workers refused the run before any request (while collecting,
    or preparing it), with the exit status one process gives for it; None if they did not."""
    return config.stash.get(REFUSAL_KEY, None)
