"""The run as one object: settings, agents, the materialized plan, the dispatcher.

Hooks in ``plugin.py`` stay thin and call into this; it lives in ``config.stash``
and is created the first time anything needs it, so sessions that never meet a
dataset never build it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from .artifacts import ArtifactPaths
from .collect import RolloutItem, find_declaration
from .jsonl import JsonlAppender, LineReader, parse_object
from .preprocess import materialize_row, rollout_order
from .stash import RUN_ID, RUN_KEY

if TYPE_CHECKING:
    from .dispatch import Dispatcher, PlannedRollout
    from .embedded import EmbeddedServers
    from .records import RolloutOutcome
    from .routing import AgentRegistry, Routing
    from .settings import Settings


class RolloutRun:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._settings: Settings | None = None
        self._registry: AgentRegistry | None = None
        self._dispatcher: Dispatcher | None = None
        self._servers: EmbeddedServers | None = None

    @classmethod
    def get(cls, config: pytest.Config) -> RolloutRun:
        run = config.stash.get(RUN_KEY, None)
        if run is None:
            run = config.stash[RUN_KEY] = cls(config)
        return run

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from .settings import resolve_settings

            self._settings = resolve_settings(self.config)
        return self._settings

    @property
    def paths(self) -> ArtifactPaths:
        assert self.settings.out is not None
        return ArtifactPaths(self.settings.out)

    def routing_for(self, dataset: Path) -> Routing:
        from .routing import AgentRegistry
        from .suite import load_suite

        if self._registry is None:
            self._registry = AgentRegistry(self.settings)
        declaration = find_declaration(dataset.parent, self.config.rootpath)
        return self._registry.routing_for(load_suite(declaration) if declaration else None)

    @staticmethod
    def number_tasks(items: Sequence[pytest.Item]) -> None:
        """Run-wide task indices in collection order, before ``-k``/``-m`` deselect anything."""
        task_index = 0
        for item in items:
            if isinstance(item, RolloutItem):
                item.task_index = task_index
                task_index += 1

    def start(self, items: Sequence[pytest.Item]) -> None:
        """Write the materialized inputs, start embedded agents, and begin dispatching."""
        from .dispatch import Dispatcher

        selected = [item for item in items if isinstance(item, RolloutItem)]
        if not selected:
            return
        for slot, item in enumerate(selected):
            item.slot = slot
        paths = self.paths
        workerinput = getattr(self.config, "workerinput", None)
        paths.start_run(workerinput[RUN_ID] if workerinput else uuid.uuid4().hex)
        rollouts = self._materialize(selected, paths.materialized)
        urls = self._agent_urls({item.agent for item in selected})
        self._dispatcher = Dispatcher(
            rollouts,
            len(selected),
            urls,
            paths.materialized,
            JsonlAppender(paths.out),
            JsonlAppender(paths.failures),
            self.settings,
            # An xdist worker cannot see which items it will be given, so it may only
            # dispatch the item it is running; look-ahead would run other workers' items.
            lookahead=workerinput is None,
        )
        self._dispatcher.start()

    def _materialize(self, items: list[RolloutItem], path: Path) -> list[PlannedRollout]:
        """Write every planned rollout's request body; return where each one sits in the file.

        Written to a private file and renamed into place, so concurrent xdist workers
        (which all materialize the same rows) never interleave their writes.
        """
        from .dispatch import PlannedRollout

        settings = self.settings
        private = path.with_name(f".{path.name}.{os.getpid()}")
        rollouts: list[PlannedRollout] = []
        row: dict[str, Any] = {}
        last_position = -1
        offset = 0
        with LineReader() as reader, open(private, "wb") as out:
            for position, rollout_index in rollout_order(len(items), settings.repeats, settings.interleave_repeats):
                item = items[position]
                if position != last_position:
                    row = parse_object(reader.read(item.path, item.offset), item.path, 0)
                    last_position = position
                line = orjson.dumps(
                    materialize_row(
                        row,
                        task_index=item.task_index,
                        rollout_index=rollout_index,
                        agent=item.agent,
                        create_params=settings.responses_create_params,
                        add_seed=settings.repeats_add_seed,
                    )
                )
                out.write(line + b"\n")
                rollouts.append(
                    PlannedRollout(item.slot, item.task_index, rollout_index, item.agent, offset, len(line))
                )
                offset += len(line) + 1
            out.flush()
            os.fsync(out.fileno())
        os.replace(private, path)
        return rollouts

    def _agent_urls(self, names: set[str]) -> dict[str, str]:
        from .embedded import EmbeddedServers

        assert self._registry is not None
        endpoints = [self._registry.endpoint(name) for name in sorted(names)]
        self._servers = EmbeddedServers(e.embedded for e in endpoints if e.embedded is not None)
        started = self._servers.start()
        return {e.name: e.url if e.url is not None else started[e.embedded] for e in endpoints}  # type: ignore[index]

    def wait(self, item: RolloutItem) -> list[RolloutOutcome]:
        if self._dispatcher is None:
            raise RuntimeError("rollouts were not dispatched in this session")
        outcomes = self._dispatcher.wait(item.slot)
        self.config.hook.pytest_rollouts_task_finished(item=item, outcomes=outcomes)
        return outcomes

    def finish(self) -> None:
        """Stop dispatch and embedded agents; every artifact is flushed and fsynced after this."""
        dispatcher, self._dispatcher = self._dispatcher, None
        servers, self._servers = self._servers, None
        try:
            if dispatcher is not None:
                dispatcher.close()
        finally:
            if servers is not None:
                servers.stop()

    def artifact_names(self) -> list[str]:
        paths = self.paths
        base = self.config.invocation_params.dir
        return [os.path.relpath(p, base) for p in (paths.out, paths.failures, paths.materialized)]
