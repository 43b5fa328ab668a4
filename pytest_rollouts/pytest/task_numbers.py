"""A pytest session's task numbers: given at collection, before ``-k``, ``-m`` and ``--lf``
deselect (a resume maps them back onto the recorded run), other shards deselected, over the
pytest-free planning core (``plan/``). What is dispatched is known only once collection is final,
when the session prepares the run's files through the lifecycle (``lifecycle/stages.py``).
Refusals become usage errors here; the core knows nothing of pytest.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_rollouts.plan.files import start_notices
from pytest_rollouts.pytest.items import DatasetFile, RolloutItem
from pytest_rollouts.pytest.progress import tell
from pytest_rollouts.pytest.role import role
from pytest_rollouts.pytest.stash import RolloutsWarning
from pytest_rollouts.store.artifacts import RunStart

if TYPE_CHECKING:
    from pytest_rollouts.config.agents import Agents
    from pytest_rollouts.config.settings import Settings
    from pytest_rollouts.rows.manifest import RunManifest


class TaskNumbers:
    """The run-wide task numbers of this session's rows, and whether it resumes an earlier run."""

    def __init__(self, config: pytest.Config, settings: Callable[[], Settings], agents: Callable[[], Agents]) -> None:
        self._config = config
        self._settings = settings
        self._agents = agents
        self.resuming = False
        # Why numbering refused the run, or "": ``prepare``, which pytest calls on its way out, does nothing.
        self.refusal = ""
        # The first row the run's configuration refused while collecting (``refuse``), or "".
        self._refused_row = ""
        # This shard holds none of the dataset's tasks: it still writes its (empty) artifacts and
        # manifest, which the merge needs to prove the shards' union complete.
        self.empty_shard = False
        # Routing keys no collected row matched, as the rollouts section names them, or "".
        self.unmatched = ""
        # The run's manifest, as numbering recorded or checked it: what preparing the files writes.
        self.manifest: RunManifest | None = None
        # The manifest a resume read from disk as it numbered the tasks: the plan is checked against it.
        self.recorded: RunManifest | None = None

    def recorded_datasets(self) -> list[str]:
        """The datasets of the run's manifest, read once (an xdist controller collects none and
        learns suite agents from them); none while no manifest is readable yet."""
        if self.manifest is None:
            from pytest_rollouts.rows.manifest import ManifestError, read_manifest

            try:
                self.manifest = read_manifest(self._settings().paths.manifest)
            except ManifestError:
                return []
        return [entry.path for entry in self.manifest.datasets]

    def shown(self, path: Path) -> str:
        """A path as the user should read it: relative to where pytest was started."""
        return os.path.relpath(path, self._config.invocation_params.dir)

    def number_tasks(self, items: list[pytest.Item], check: Callable[[], None] = lambda: None) -> None:
        """Give every collected row its run-wide task index, before ``-k``/``-m``/``--lf`` deselect.

        A fresh run numbers rows in collection order; a resumed one takes each file's first
        index from the recorded manifest, so files this session skips shift nothing. ``check``:
        what else refuses the collected run first (``pytest.UsageError``).

        A refusal is a usage error, but not raised on an xdist worker: pytest still reports its
        collection to the controller, which queues items for it, and a worker that then ends
        without a stop crashes the controller. Its run loop stops it instead (``Workers.hold_back``).
        """
        try:
            if self._refused_row:
                raise pytest.UsageError(self._refused_row)
            check()
            self._number_tasks(items)
        except pytest.UsageError as exc:
            self.refusal = str(exc)
            if role(self._config).owns_run:
                raise

    def refuse(self, row: str) -> None:
        """A row the run's configuration refuses (``DatasetRefused``), met while collecting: the run
        is refused once collection is done, as a usage error, as a bad option is. A collection error
        would end it as interrupted (exit 2), as if a file were broken."""
        self._refused_row = self._refused_row or row

    def _number_tasks(self, items: list[pytest.Item]) -> None:
        from pytest_rollouts.config.agents import AgentsError
        from pytest_rollouts.plan.build import PlanError
        from pytest_rollouts.plan.numbering import DatasetTasks, number_run

        files: dict[DatasetFile, DatasetTasks] = {}
        for item in items:
            if isinstance(item, RolloutItem):
                dataset: DatasetFile = item.parent  # type: ignore[assignment]
                tasks = files.get(dataset)
                if tasks is None:
                    name = Path(dataset.relpath).as_posix()
                    tasks = files[dataset] = DatasetTasks(name, dataset.sha256, dataset.rows, declared=dataset.declared)
                tasks.agents.add(item.agent)
                tasks.rollouts += item.repeats
        if not files:
            return
        settings = self._settings()
        asked = settings.resume or bool(getattr(self._config.option, "lf", False))
        try:
            numbering = number_run(list(files.values()), settings, self._agents(), asked_resume=asked, shown=self.shown)
        except (AgentsError, PlanError) as exc:
            raise pytest.UsageError(str(exc)) from None
        self.resuming, self.manifest, self.recorded = numbering.resuming, numbering.manifest, numbering.recorded
        # Said in the rollouts section, where it is read, not among pytest's warnings.
        self.unmatched = numbering.unmatched
        for notice in numbering.notices:  # a worker has no terminal: its warnings reach the controller's
            tell(self._config, notice) or warnings.warn(RolloutsWarning(notice), stacklevel=1)
        firsts = {dataset: numbering.first_task[tasks.name] for dataset, tasks in files.items()}
        for item in items:
            if isinstance(item, RolloutItem):
                item.task_index = firsts[item.parent] + item.row_index  # type: ignore[index]
        if settings.shard is not None:
            self._keep_shard(items, settings.shard)

    def _keep_shard(self, items: list[pytest.Item], shard: tuple[int, int]) -> None:
        """Deselect the rows of other shards, the way ``-k`` deselects: they are not this run's."""
        from pytest_rollouts.rows.shard import in_shard

        keep, drop = [], []
        for item in items:
            mine = not isinstance(item, RolloutItem) or in_shard(item.task_index, shard)
            (keep if mine else drop).append(item)
        if drop:
            self._config.hook.pytest_deselected(items=drop)
            items[:] = keep
            self.empty_shard = not any(isinstance(item, RolloutItem) for item in keep)


def tell_start(config: pytest.Config, start: RunStart, out: Path) -> None:
    """What preparing the files did, as plain lines on the terminal where the run shows.

    Not warnings: under ``-W error`` a warning raised once the files were moved ended every
    rerun in INTERNALERROR. The lines open with ``rollouts:``, as the progress line does."""
    from pytest_rollouts.pytest.progress import own_line

    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        return
    invoked = config.invocation_params.dir

    def shown(path: Path) -> str:
        return os.path.relpath(path, invoked)

    for notice in start_notices(start, out, resume="--rollouts-resume", overwrite="--rollouts-overwrite", shown=shown):
        own_line(terminal, "rollouts: " + notice)
