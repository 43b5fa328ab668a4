"""A pytest session's hold on its output (``store.runlock``), from configure or preparation to
unconfigure; an xdist controller's workers join the hold it took for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_rollouts.pytest.stash import HELD_KEY
from pytest_rollouts.store.runlock import RunLock

if TYPE_CHECKING:
    from pytest_rollouts.pytest.role import Role
    from pytest_rollouts.store.artifacts import ArtifactPaths


def hold(
    config: pytest.Config,
    paths: ArtifactPaths,
    run_id: str,
    this: Role | None = None,
    *,
    shared: bool = False,
) -> RunLock | None:
    """This session's hold on the output, until pytest unconfigures; ``OutputBusy`` when another
    session has it. An xdist worker joins the hold of its controller (``shared``) and holds
    nothing of its own: None."""
    lock = RunLock(paths.lock, paths.out)
    if this is not None and this.worker:
        lock.join(run_id if this.joins_lock else None)
        config.add_cleanup(lock.release)
        return None
    left = lock.acquire(run_id, shared=shared)
    config.stash[HELD_KEY] = lock
    config.add_cleanup(lock.release)
    if left is not None:
        from pytest_rollouts.pytest.progress import tell

        tell(config, f"{paths.out}: took it over from a run that was killed ({left})")
    return lock
