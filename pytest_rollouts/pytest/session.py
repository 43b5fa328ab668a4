"""The run as one object: settings, agents, the plan (fresh or resumed), the dispatcher.

Hooks in ``plugin.py`` stay thin and call into this; it lives in ``config.stash`` and
is created the first time anything needs it, so sessions that never meet a dataset
never build it. Its life follows pytest's: ``number_tasks`` at collection,
``prepare`` once collection is final, ``start`` and ``finish`` around the run loop.
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.store.artifacts import ArtifactPaths, RunStart, artifact_rows, read_rows, torn_tail
from pytest_rollouts.pytest.items import DatasetFile, RolloutItem, find_declaration
from pytest_rollouts.dispatch.channel import AgentsUnhealthy, Dispatcher, DispatcherGone, PlannedRollout, spawn_engine, stop_unused
from pytest_rollouts.store.jsonl import ArtifactError, JsonlError, LineReader, dumps, parse_object, replaced_atomically
from pytest_rollouts.rows.materialize import materialize_row, rollout_order
from pytest_rollouts.rows.records import RolloutOutcome, routing_identity
from pytest_rollouts.rows.resume import KeyHistory, Verdict, decide, histories, key_of
from pytest_rollouts.pytest.lock import hold
from pytest_rollouts.store.runlock import OutputBusy
from pytest_rollouts.pytest.stash import RolloutsWarning, DISPATCH_STOPPED, RUN_ID, RUN_ID_KEY, RUN_KEY
from pytest_rollouts.pytest.stopping import StopHandling

if TYPE_CHECKING:
    from pytest_rollouts.scoring.accounting import Key
    from pytest_rollouts.scoring.aggregate import OutputScan, RunScore
    from pytest_rollouts.config.embedded import EmbeddedServers
    from pytest_rollouts.rows.manifest import RunManifest
    from pytest_rollouts.config.routing import AgentRegistry, Routing
    from pytest_rollouts.config.settings import Settings


HEAD_SERVER_TIMEOUT_S = 10.0
# While pytest waits on the dispatcher it reads the outputs for scoring in pieces this
# small (a few ms each, longer only for a row of several MB), and once caught up it looks
# again only after a pause (a look costs syscalls; rows come by hundreds).
READ_AHEAD_BYTES = 1 << 16
READ_AHEAD_PAUSE_S = 0.1


@dataclass
class Plan:
    """What this session dispatches, and what earlier runs already settled (on resume)."""

    rollouts: list[PlannedRollout]
    slots: int
    prior: dict[int, list[RolloutOutcome]] = field(default_factory=dict)
    # Every materialized row by routing identity and key, and its offset: what scoring counts against.
    expected: dict[str, dict[Key, int]] = field(default_factory=dict)


class RolloutRun:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.resuming = False
        self.lean = False
        self._refused = False
        # An xdist controller put the files back as it found them: no run of its own is left to score.
        self._taken_back = False
        # This shard holds none of the dataset's tasks: it still writes its (empty) artifacts and
        # manifest, which the merge needs to prove the shards' union complete.
        self.empty_shard = False
        # Why dispatch stopped early (an artifact unwritable, a dispatcher bug or death), or "".
        self.dispatch_failure = ""
        # This session started dispatching (a refusal before any request leaves it False).
        self.dispatched = False
        # The plan went to the dispatcher: a session stopped from here on says what it covered.
        self._handed_over = False
        self._run_start = RunStart()
        # Stops are this run's to handle until pytest unconfigures.
        self.stops = StopHandling()
        config.add_cleanup(self.stops.remove)
        self._stopped = ""
        # Set by the reporter: called on the dispatcher's heartbeat, so progress shows while items wait.
        self.on_heartbeat: Callable[[], None] | None = None
        self._settings: Settings | None = None
        self._registry: AgentRegistry | None = None
        self._manifest: RunManifest | None = None
        self._plan: Plan | None = None
        self._outputs: OutputScan | None = None
        self._read_ahead_after = 0.0
        self._dispatcher: Dispatcher | None = None
        self._servers: list[EmbeddedServers] = []
        self._urls: dict[str, str] = {}
        self._engine: subprocess.Popen[bytes] | None = None
        self._worker_queue: Any = None
        # On an xdist controller, what each worker said of its part when it went down (None: it
        # crashed before saying anything).
        self._worker_reports: list[dict[str, Any] | None] = []

    @classmethod
    def get(cls, config: pytest.Config) -> RolloutRun:
        run = config.stash.get(RUN_KEY, None)
        if run is None:
            run = config.stash[RUN_KEY] = cls(config)
        return run

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from pytest_rollouts.pytest.resolve import resolve_settings

            self._settings = resolve_settings(self.config)
        return self._settings

    @property
    def paths(self) -> ArtifactPaths:
        assert self.settings.out is not None
        return ArtifactPaths(self.settings.out)

    def warm_engine(self) -> None:
        """Start the dispatcher process early, so its imports overlap with collection.

        Not for sessions that will run nothing: ``--co``, ``--help``, ``--fixtures``, ``--markers``.
        """
        option = self.config.option
        informational = ("collectonly", "help", "showfixtures", "show_fixtures_per_test", "markers")
        if self._engine is None and not any(getattr(option, name, False) for name in informational):
            self._engine = spawn_engine()

    def configure(self) -> None:
        """Fail fast (exit 4) on bad settings or an unreadable head server, before collecting anything.

        A session asked for rollouts on the command line also starts its dispatcher process
        now, so its imports overlap with collection however few rows there are (an xdist
        controller never dispatches, so it starts none). Others start it at their first dataset.
        """
        if self._dispatches_here() and self._asked_on_command_line():
            self.warm_engine()  # first: its imports then overlap with pydantic's in this process
        if self.settings.head_server is not None:
            self.registry  # noqa: B018 - discovery happens on first use
        settings = self.settings
        if settings.drain_margin is not None and settings.dispatch_budget is None:
            unused = RolloutsWarning("--rollouts-drain-margin has no effect without --rollouts-dispatch-budget")
            self.config.issue_config_time_warning(unused, stacklevel=2)

    def _dispatches_here(self) -> bool:
        """Not on an xdist controller: its workers dispatch."""
        return not self.config.getoption("numprocesses", None) or hasattr(self.config, "workerinput")

    def _asked_on_command_line(self) -> bool:
        """A rollouts option or a ``.jsonl`` on the command line; rollouts options only in an ini file
        may belong to a repository whose everyday test runs collect no dataset."""
        from pytest_rollouts.options import OPTIONS

        config = self.config
        if any(str(arg).split("::")[0].endswith(".jsonl") for arg in config.args):
            return True
        return any(config.getoption("rollouts_" + option.name) not in (None, []) for option in OPTIONS)

    @property
    def registry(self) -> AgentRegistry:
        """The agents this run can reach; a head server is asked once, before the first dataset is read."""
        if self._registry is None:
            from pytest_rollouts.config.routing import AgentRegistry

            discovered = None
            if self.settings.head_server is not None:
                from pytest_rollouts.config.headserver import HeadServerError, discover

                try:
                    discovered = discover(self.settings.head_server, timeout=HEAD_SERVER_TIMEOUT_S)
                except HeadServerError as exc:
                    raise pytest.UsageError(str(exc)) from None
            self._registry = AgentRegistry(self.settings, discovered)
        return self._registry

    def routing_for(self, dataset: Path) -> Routing:
        from pytest_rollouts.config.suite import load_suite

        declaration = find_declaration(dataset.parent, self.config.rootpath)
        return self.registry.routing_for(load_suite(declaration) if declaration else None)

    # -- collection ----------------------------------------------------------------------

    def number_tasks(self, items: list[pytest.Item]) -> None:
        """Number the tasks; a refusal here also stops ``prepare``, which pytest calls on its way out."""
        try:
            self._number_tasks(items)
        except pytest.UsageError:
            self._refused = True
            raise

    def _number_tasks(self, items: list[pytest.Item]) -> None:
        """Give every collected row its run-wide task index, before ``-k``/``-m``/``--lf`` deselect.

        A fresh run numbers rows in collection order; a resumed one takes each file's first
        index from the recorded manifest, so files this session skips shift nothing.
        """
        from pytest_rollouts.rows.manifest import DatasetEntry, ManifestError, RunManifest, differences, read_manifest

        files: dict[DatasetFile, set[str]] = {}
        rollouts: dict[DatasetFile, int] = {}
        for item in items:
            if isinstance(item, RolloutItem):
                dataset: DatasetFile = item.parent  # type: ignore[assignment]
                files.setdefault(dataset, set()).add(item.agent)
                rollouts[dataset] = rollouts.get(dataset, 0) + item.repeats
        if not files:
            return
        self._check_named_agents()
        unused = self.registry.unused_keys()
        if unused:
            warnings.warn(
                RolloutsWarning(
                    f"no collected row is keyed {', '.join(map(repr, unused))} "
                    "(--rollouts-agent-map / --rollouts-fan-out): a typo? Keys are agent names, task "
                    "sources, tasksets or _default"
                ),
                stacklevel=1,
            )
        paths = self.paths
        self.resuming = self._wants_resume(paths)
        try:
            recorded = read_manifest(paths.manifest) if self.resuming else None
        except ManifestError as exc:
            raise pytest.UsageError(f"cannot resume: {exc}") from None
        next_task = recorded.next_task() if recorded else 0
        entries = []
        for dataset, agents in files.items():
            name = Path(dataset.relpath).as_posix()
            known = recorded.entry(name) if recorded else None
            first = known.first_task if known else next_task
            next_task = max(next_task, first + dataset.rows)
            entries.append(
                DatasetEntry(
                    path=name,
                    sha256=dataset.sha256,
                    rows=dataset.rows,
                    first_task=first,
                    agents=sorted(agents),
                    rollouts=rollouts[dataset],
                )
            )
        self._manifest = RunManifest(datasets=entries, shape=self._shape())
        if recorded is not None:
            changed = differences(recorded, self._manifest)
            if changed and not self.settings.resume_recorded:
                raise pytest.UsageError(_refuse_changed(paths, changed))
        elif self.resuming:
            warnings.warn(
                RolloutsWarning(
                    f"no run manifest next to {paths.out}; resuming from "
                    f"{paths.materialized} without checking the input"
                ),
                stacklevel=1,
            )
        firsts = {dataset: entry.first_task for dataset, entry in zip(files, entries, strict=True)}
        for item in items:
            if isinstance(item, RolloutItem):
                item.task_index = firsts[item.parent] + item.row_index  # type: ignore[index]
        if self.settings.shard is not None:
            self._keep_shard(items, self.settings.shard)

    def _check_named_agents(self) -> None:
        """A per-agent repeat count or header for an agent nobody knows is a typo that would go unnoticed."""
        from pytest_rollouts.config.settings import DEFAULT_KEY

        settings, registry = self.settings, self.registry
        repeats = settings.repeats if isinstance(settings.repeats, dict) else {}
        for option, names in (
            ("repeats", [a for a in repeats if a != DEFAULT_KEY]),
            ("agent_header", [h.agent for h in settings.agent_header if h.agent is not None]),
        ):
            unknown = sorted({a for a in names if not registry.knows(a)})
            if unknown:
                raise pytest.UsageError(f"{settings.source_of(option)} names unknown agents: {', '.join(unknown)}")

    def _keep_shard(self, items: list[pytest.Item], shard: tuple[int, int]) -> None:
        """Deselect the rows of other shards, the way ``-k`` deselects: they are not this run's."""
        from pytest_rollouts.rows.shard import in_shard

        keep, drop = [], []
        for item in items:
            mine = not isinstance(item, RolloutItem) or in_shard(item.task_index, shard)
            (keep if mine else drop).append(item)
        if drop:
            self.config.hook.pytest_deselected(items=drop)
            items[:] = keep
            self.empty_shard = not any(isinstance(item, RolloutItem) for item in keep)

    def began(self) -> bool:
        """This session started the run: it dispatched (or was stopped while handing the plan over,
        not refused), or its xdist workers did."""
        return self.dispatched or (self._handed_over and not self._stopped) or self._workers_started()

    def holds_no_task(self) -> bool:
        """A shard that none of the dataset's tasks fell to, and whose (empty) artifacts are written."""
        if self.empty_shard:
            return True
        paths = self.paths
        return (
            self.settings.shard is not None
            and self._workers_started()
            and paths.materialized.exists()
            and paths.materialized.stat().st_size == 0
        )

    def _workers_started(self) -> bool:
        """On an xdist controller, which collects and sends nothing itself: its workers prepared the
        files under its run id."""
        run_id = self.config.stash.get(RUN_ID_KEY, None)
        return run_id is not None and self.paths.started_by(run_id)

    def _wants_resume(self, paths: ArtifactPaths) -> bool:
        """``--lf`` re-runs failed items with resume semantics: never a fresh run over their siblings.

        Nothing recorded yet is a fresh run, so a job script can always ask to resume. Results
        without their materialized inputs are refused: a fresh run would move every result aside,
        and without the run's denominator there is nothing to resume against.
        """
        asked = self.settings.resume or bool(getattr(self.config.option, "lf", False))
        if not asked or paths.materialized.exists():
            return asked
        held = [self.shown(p) for p in (paths.out, paths.failures) if p.exists() and p.stat().st_size]
        if held:
            raise pytest.UsageError(
                f"cannot resume: the materialized inputs {self.shown(paths.materialized)} are missing, though "
                f"{' and '.join(held)} hold rows of the run they belong to; they are what a resume runs against: "
                "restore them, or run without --rollouts-resume to start afresh (the earlier results are moved aside)"
            )
        return False

    def _shape(self) -> dict[str, Any]:
        s = self.settings
        return {
            "repeats": s.repeats,
            "limit": s.limit,
            "interleave_repeats": s.interleave_repeats,
            "repeats_add_seed": s.repeats_add_seed,
            "responses_create_params": s.responses_create_params,
            "shard": None if s.shard is None else f"{s.shard[0]}/{s.shard[1]}",
            # Only when used, so runs recorded before routing options existed still resume.
            **({"agent_map": s.agent_map} if s.agent_map else {}),
            **({"fan_out": {key: list(agents) for key, agents in s.fan_out.items()}} if s.fan_out else {}),
        }

    def prepare(self, items: Sequence[pytest.Item]) -> None:
        """Once collection is final: set up the files and decide exactly what will be sent."""
        selected = [item for item in items if isinstance(item, RolloutItem)]
        if (not selected and not self.empty_shard) or self._refused:
            return
        for slot, item in enumerate(selected):
            item.slot = slot
        self.lean = len(selected) == len(items)
        paths = self.paths
        workerinput = getattr(self.config, "workerinput", None)
        run_id = workerinput[RUN_ID] if workerinput else uuid.uuid4().hex
        try:
            hold(self.config, paths, run_id, workerinput)  # before anything is moved or sent
            self._run_start = paths.start_run(run_id, resume=self.resuming)
        except OutputBusy as exc:
            self._refuse_on_worker(str(exc))
            return
        except OSError as exc:  # a read-only or missing place: nothing was sent
            self._refuse_on_worker(f"cannot write the artifacts next to {paths.out}: {exc}")
            return
        _tell(self._run_start)
        if self.resuming:
            self._plan = self._plan_resume(selected, paths)
            return
        from pytest_rollouts.rows.manifest import write_manifest

        assert self._manifest is not None
        try:
            write_manifest(paths.manifest, self._manifest)
            self._plan = self._materialize(selected, paths.materialized)
        except ArtifactError as exc:  # a full disk before anything was sent
            self._refuse_on_worker(f"{exc}{self._put_back(workerinput)}")

    def _materialize(self, items: list[RolloutItem], path: Path) -> Plan:
        """Write every planned rollout's request body, remembering where each one sits.

        Written to a private file and renamed into place, so concurrent xdist workers
        (which all materialize the same rows) never interleave their writes.
        """
        settings = self.settings
        rollouts: list[PlannedRollout] = []
        row: dict[str, Any] = {}
        expected: dict[str, dict[Key, int]] = {}
        last_position = -1
        offset = 0
        with LineReader() as reader, replaced_atomically(path) as out:
            counts = [(item.first_rollout, item.repeats) for item in items]
            for position, rollout_index in rollout_order(counts, settings.interleave_repeats):
                item = items[position]
                if position != last_position:
                    row = parse_object(reader.read(item.path, item.offset), item.path, 0)
                    last_position = position
                materialized = materialize_row(
                    row,
                    task_index=item.task_index,
                    rollout_index=rollout_index,
                    agent=item.agent,
                    create_params=settings.responses_create_params,
                    add_seed=settings.repeats_add_seed,
                    episode=item.episode,
                )
                line = dumps(materialized)
                out.write(line + b"\n")
                expected.setdefault(routing_identity(materialized), {})[(item.task_index, rollout_index)] = offset
                rollouts.append(
                    PlannedRollout(
                        item.slot, item.task_index, rollout_index, item.agent, offset, len(line), episode=item.episode
                    )
                )
                offset += len(line) + 1
        return Plan(rollouts, len(items), expected=expected)

    def _plan_resume(self, items: list[RolloutItem], paths: ArtifactPaths) -> Plan:
        """Re-run what the recorded materialized set still lacks; settle the rest from disk."""
        from pytest_rollouts.rows.episodes import taskset_of

        settings = self.settings
        try:
            past = histories(read_rows(paths.out), read_rows(paths.failures))
        except JsonlError as exc:
            raise pytest.UsageError(f"cannot resume: {exc}") from None
        slots = {(item.task_index, item.agent): item.slot for item in items}
        plan = Plan([], len(items))
        cut = torn_tail(paths.materialized)
        if cut:
            # Written whole and renamed into place, so no crash cuts it: a key lost here would
            # silently leave the run's denominator.
            raise pytest.UsageError(
                f"cannot resume: {self.shown(paths.materialized)} ends in a line cut short ({cut} bytes); "
                "it is written whole, so the file was damaged: restore it, or start a fresh run"
            )
        try:
            recorded = [
                (entry, key_of(entry.row), routing_identity(entry.row)) for entry in artifact_rows(paths.materialized)
            ]
        except JsonlError as exc:
            raise pytest.UsageError(f"cannot resume: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise pytest.UsageError(
                f"cannot resume: a row of {paths.materialized} lacks its stamps ({exc!r})"
            ) from None
        for entry, key, agent in recorded:
            plan.expected.setdefault(agent, {})[key] = entry.offset
            slot = slots.get((key[0], agent))
            if slot is None:
                continue
            history = past.by_key.get(key)
            verdict = decide(
                history, max_attempts=settings.max_attempts, retry_terminal_timeouts=settings.retry_terminal_timeouts
            )
            if verdict is Verdict.RUN:
                plan.rollouts.append(
                    PlannedRollout(
                        slot,
                        key[0],
                        key[1],
                        agent,
                        entry.offset,
                        entry.size,
                        first_attempt=history.failures if history else 0,
                        episode=taskset_of(entry.row) is not None,
                    )
                )
            else:
                assert history is not None
                plan.prior.setdefault(slot, []).append(_settled(key[1], verdict, history, settings.max_attempts))
        if settings.longest_first:
            longest = past.task_longest()
            plan.rollouts.sort(key=lambda r: -longest.get(r.task_index, 0.0))
        return plan

    # -- the run loop --------------------------------------------------------------------

    def start(self, session: pytest.Session) -> None:
        """Start embedded agents and begin dispatching the prepared plan."""
        plan, self._plan = self._plan, None
        controller = self.config.pluginmanager.get_plugin("dsession") is not None
        # A worker ends with its controller, which takes the signal for it.
        if not hasattr(self.config, "workerinput") and (plan is not None or controller):
            self.stops.install()
        if plan is None:
            return
        # Items and collection state live until the end; keeping them out of the cyclic
        # collector's reach saves its passes over them during the run.
        gc.freeze()
        paths = self.paths
        workerinput = getattr(self.config, "workerinput", None)
        try:
            urls = self._agent_urls({r.agent for r in plan.rollouts})
        except pytest.UsageError as exc:
            self._refuse_on_worker(f"{exc}{self._put_back(workerinput)}")
            return
        parallel = self.settings.parallel
        if workerinput is not None:
            from pytest_rollouts.pytest.xdist import parallel_share

            parallel = parallel_share(parallel, workerinput)
        self._dispatcher = Dispatcher(
            plan.rollouts,
            plan.slots,
            urls,
            (paths.materialized, paths.out, paths.failures),
            self.settings,
            prior=plan.prior,
            parallel=parallel,
            worker=workerinput is not None,
            process=self._engine,
        )
        self._engine = None
        self._dispatcher.on_progress = self._heartbeat
        if workerinput is None:  # xdist workers never score; their controller does
            from pytest_rollouts.scoring.aggregate import OutputScan

            self._outputs = OutputScan(paths.out, plan.expected)
            self._dispatcher.on_idle = self._read_ahead
        self._handed_over = True
        try:
            self._dispatcher.start()
        except (AgentsUnhealthy, DispatcherGone) as exc:
            self.finish()
            self.dispatch_failure = ""  # a refusal before any request, not a run to score
            self._stopped = f"{exc}{self._put_back(workerinput)}"
            if workerinput is None:
                unhealthy = isinstance(exc, AgentsUnhealthy)
                code = pytest.ExitCode.INTERRUPTED if unhealthy else pytest.ExitCode.INTERNAL_ERROR
                pytest.exit(self._stopped, returncode=code)
            return  # see _refuse_on_worker
        self.dispatched = True

    def _refuse_on_worker(self, why: str) -> None:
        """Refuse the run before any request: a usage error in one process. An xdist worker must not
        end on its own (its controller would see it vanish with items queued, and crash): its
        first item fails with ``why`` and stops the session (``wait``)."""
        if not hasattr(self.config, "workerinput"):
            raise pytest.UsageError(why)
        self._stopped = why

    def _put_back(self, workerinput: dict[str, Any] | None) -> str:
        """A fresh run refused before any request leaves the files as it found them; what to add
        to the refusal. Not on an xdist worker: others may be writing the same files."""
        if workerinput is not None or self.resuming:
            return ""
        self.paths.take_back(self._run_start)
        moved = self._run_start.moved_to
        return "" if moved is None else f"\nThe earlier results are back in place (from {moved})."

    def worker_report(self) -> dict[str, Any]:
        """What an xdist worker tells its controller: whether it sent anything, and where it moved
        the earlier results (the worker that prepared the files did)."""
        moved = self._run_start.moved_to
        return {"dispatched": self.dispatched, "moved_to": None if moved is None else str(moved)}

    def hear_worker(self, report: dict[str, Any] | None) -> None:
        self._worker_reports.append(report)

    def put_back_unsent(self) -> str:
        """On an xdist controller: a fresh run that no worker sent anything for (each refused, as
        one process would) leaves the files as it found them, as one process does; what to tell.

        Only when every worker said so: one that crashed may have sent requests.
        """
        reports = self._worker_reports
        if (
            self.resuming
            or not reports
            or any(r is None or r["dispatched"] for r in reports)
            or not self._workers_started()
        ):
            return ""
        moved = next((Path(r["moved_to"]) for r in reports if r is not None and r["moved_to"]), None)
        self.paths.take_back(RunStart(moved_to=moved))
        self._taken_back = True
        return "" if moved is None else f"The earlier results are back in place (from {moved})."

    def _agent_urls(self, names: set[str]) -> dict[str, str]:
        """Addresses of ``names``, starting embedded agents that are not running yet.

        An xdist controller collects nothing, so it learns suite agents from the datasets
        the manifest records.
        """
        from pytest_rollouts.rows.manifest import ManifestError, read_manifest

        registry = self.registry
        missing = sorted(names - set(self._urls))
        if any(not registry.knows(name) for name in missing):
            try:
                manifest = read_manifest(self.paths.manifest)
            except ManifestError:
                manifest = None
            for entry in manifest.datasets if manifest else ():
                self.routing_for(self.config.rootpath / entry.path)
        unknown = [name for name in missing if not registry.knows(name)]
        if unknown:
            raise pytest.UsageError(f"agent {unknown[0]!r} of the recorded run is not configured in this session")
        endpoints = [registry.endpoint(name) for name in missing]
        factories = [e.embedded for e in endpoints if e.embedded is not None]
        started = self._start_embedded(factories, missing) if factories else {}
        for e in endpoints:
            self._urls[e.name] = e.url if e.url is not None else started[e.embedded]  # type: ignore[index]
        return {name: self._urls[name] for name in names}

    def _start_embedded(self, factories: list[tuple[Path, str]], names: list[str]) -> dict[tuple[Path, str], str]:
        """Serve suite-embedded agents; aiohttp is imported only here, off the path of runs that have none."""
        from pytest_rollouts.config.embedded import EmbeddedServerError, EmbeddedServers

        servers = EmbeddedServers(factories)
        self._servers.append(servers)
        try:
            return servers.start()
        except Exception as exc:  # the suite's own code: say which agent, not an internal error
            why = str(exc) if isinstance(exc, EmbeddedServerError) else repr(exc)
            raise pytest.UsageError(f"cannot start an embedded agent ({', '.join(names)}): {why}") from exc

    def wait(self, item: RolloutItem) -> list[RolloutOutcome]:
        if not self._stopped:
            if self._dispatcher is None:
                raise RuntimeError("rollouts were not dispatched in this session")
            try:
                if hasattr(self.config, "workerinput"):
                    # Its own task first: claimed after the queue's, it waited behind all of them.
                    self._dispatcher.claim([item.slot, *self._queued_slots(item.session.items)])
                outcomes = self._dispatcher.wait(item.slot)
            except DispatcherGone as exc:
                self._stopped = self.dispatch_failure = str(exc)
        if self._stopped:  # outside the handler, so the report shows the reason, not a chained traceback
            # Nothing not reported yet will be: stop here, like -x, instead of failing every item
            # left. A run that dispatched is scored; one refused before any request is not.
            if self.dispatch_failure:
                item.session.shouldfail = DISPATCH_STOPPED
            else:
                item.session.shouldstop = self._stopped
            pytest.fail(self._stopped, pytrace=False)
        hook = self.config.hook.pytest_rollouts_task_finished
        if outcomes and hook.get_hookimpls():  # a hook call costs microseconds even with no listener
            hook(item=item, outcomes=outcomes)
        return outcomes

    def _read_ahead(self) -> bool:
        """pytest would block on the dispatcher: read the outputs written so far, for scoring."""
        now = time.monotonic()
        if self._outputs is None or now < self._read_ahead_after:
            return False
        try:
            more = self._outputs.advance(READ_AHEAD_BYTES)
        except BaseException as exc:
            # Broken off part-way: scoring starts over from the first row (and reports a bad one).
            self._outputs = self._outputs.restarted()
            self._read_ahead_after = math.inf
            if isinstance(exc, JsonlError | OSError):
                return False
            raise
        if not more:
            self._read_ahead_after = now + READ_AHEAD_PAUSE_S
        return more

    def _heartbeat(self) -> None:
        if self.on_heartbeat is not None:
            self.on_heartbeat()

    def in_flight(self) -> tuple[int, float | None, list[int] | None] | None:
        """(requests in flight, age of the oldest, its task and rollout), when this process dispatches."""
        return self._dispatcher.in_flight if self._dispatcher is not None else None

    def finished(self) -> tuple[int, int, dict[str, int]] | None:
        """(tasks finished, rollouts sent, failures by class), when this process dispatches."""
        return self._dispatcher.finished if self._dispatcher is not None else None

    def _queued_slots(self, items: Sequence[pytest.Item]) -> list[int]:
        """On an xdist worker, the tasks queued behind the running one: its only safe look-ahead."""
        from pytest_rollouts.pytest.xdist import queued_indices, worker_queue

        if self._worker_queue is None:
            self._worker_queue = worker_queue(self.config)
        return [item.slot for i in queued_indices(self._worker_queue) if isinstance(item := items[i], RolloutItem)]

    def finish(self) -> None:
        """Stop dispatch: every artifact is flushed and fsynced after this."""
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None:
            dispatcher.close()
            self.dispatch_failure = self.dispatch_failure or dispatcher.failure

    def score(
        self,
        perf_summary: dict[str, Any] | None = None,
        drained: frozenset[tuple[int, int]] = frozenset(),
        *,
        coverage_only: bool = False,
    ) -> RunScore | None:
        """Coverage and metrics from the files on disk, once per run (never on an xdist worker).

        ``coverage_only``: a run stopped by the user is not scored, but says what it covered.
        """
        from pytest_rollouts.scoring.accounting import ScoringPolicy
        from pytest_rollouts.scoring.aggregate import score_run
        from pytest_rollouts.net.auth import headers_for
        from pytest_rollouts.pacing import paced

        paths, settings = self.paths, self.settings
        if not paths.materialized.exists():
            if self.began() and not self._taken_back:  # it wrote them: removed since, and what the score counts against
                raise pytest.UsageError(
                    f"cannot score the run: its materialized inputs {self.shown(paths.materialized)} were "
                    "removed while it ran; restore them and --rollouts-resume, or start afresh"
                )
            return None
        policy = ScoringPolicy(settings.count_as_zero, settings.count_missing_as_zero)
        try:
            with paced():
                return score_run(
                    paths,
                    policy,
                    agent_url=self._metrics_url,
                    agent_headers=lambda name: headers_for(settings.agent_header, name),
                    write_metrics=not (settings.no_aggregate or coverage_only),
                    timeout=settings.timeout,
                    perf_summary=perf_summary,
                    outputs=self._outputs,
                    drained=drained,
                )
        except JsonlError as exc:
            raise pytest.UsageError(f"cannot score the run: {exc}") from None

    def scoring_interrupted(self) -> str:
        """Scoring was stopped part-way. A metrics file an earlier session of the run left would
        now contradict its rows, so it goes; every row stays, and a resume scores them."""
        self.paths.metrics.unlink(missing_ok=True)
        return (
            "Interrupted while scoring: no metrics file written; "
            "--rollouts-resume scores the run (none with a row is sent again)"
        )

    def _metrics_url(self, name: str) -> str | None:
        """Where a group's ``/aggregate_metrics`` lives; None (local metrics) for an agent not configured now."""
        try:
            return self._agent_urls({name})[name]
        except pytest.UsageError:
            return None

    def close(self) -> None:
        """Stop the embedded agents; they outlive dispatch so ``/aggregate_metrics`` can reach them."""
        self.finish()
        if self._engine is not None:
            stop_unused(self._engine)
            self._engine = None
        servers, self._servers = self._servers, []
        for server in servers:
            server.stop()

    def artifact_names(self) -> list[str]:
        paths = self.paths
        return [self.shown(p) for p in (paths.out, paths.failures, paths.materialized)]

    def shown(self, path: Path) -> str:
        return os.path.relpath(path, self.config.invocation_params.dir)


def _settled(rollout_index: int, verdict: Verdict, history: KeyHistory, max_attempts: int) -> RolloutOutcome:
    if verdict is Verdict.DONE:
        return RolloutOutcome(rollout_index, history.reward, None, "", history.longest, 0, cached=True)
    why = (
        "terminal failure recorded earlier"
        if verdict is Verdict.TERMINAL
        else f"gave up after {history.failures} attempts (max {max_attempts})"
    )
    return RolloutOutcome(
        rollout_index,
        None,
        history.latest_class,
        ": ".join(filter(None, (why, history.latest_message))),
        history.longest,
        0,
        cached=True,
        given_up=verdict is Verdict.CAPPED,
    )


def _refuse_changed(paths: ArtifactPaths, changed: list[str]) -> str:
    lines = [f"cannot resume {paths.out}: the input changed since the recorded run:"]
    lines += [f"  - {c}" for c in changed]
    lines.append(
        "Run without --rollouts-resume to start over (the old artifacts are moved aside), "
        "or pass --rollouts-resume-recorded to go on with the recorded materialized set."
    )
    return "\n".join(lines)


def _tell(start: RunStart) -> None:
    if start.moved_to is not None:
        warnings.warn(
            RolloutsWarning(
                f"earlier results were moved to {start.moved_to} (use --rollouts-resume to continue a run instead)"
            ),
            stacklevel=1,
        )
    for path, size in (start.repaired or {}).items():
        warnings.warn(RolloutsWarning(f"{path}: dropped a last line cut short by a crash ({size} bytes)"), stacklevel=1)
