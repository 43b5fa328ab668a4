"""The run as one object: settings, agents, the plan (fresh or resumed), the dispatcher.

Hooks in ``plugin.py`` stay thin and call into this; it lives in ``config.stash`` and
is created the first time anything needs it, so sessions that never meet a dataset
never build it. Its life follows pytest's: ``number_tasks`` at collection,
``prepare`` once collection is final, ``start`` and ``finish`` around the run loop.
"""

from __future__ import annotations

import gc
import os
import subprocess
import uuid
from collections.abc import Callable, Sequence
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_rollouts.dispatch.channel import Dispatcher, DispatcherGone
from pytest_rollouts.dispatch.process import HealthUnasked, ask_health, spawn_engine, stop_unused
from pytest_rollouts.dispatch.record import DispatchRecord
from pytest_rollouts.lifecycle.refusal import Refusal
from pytest_rollouts.pytest.health import refusal_said
from pytest_rollouts.pytest.items import RolloutItem
from pytest_rollouts.pytest.lock import hold
from pytest_rollouts.pytest.role import role
from pytest_rollouts.pytest.stash import DISPATCH_STOPPED, RUN_KEY, Refused
from pytest_rollouts.pytest.status import SessionStatus
from pytest_rollouts.pytest.stopping import StopHandling
from pytest_rollouts.pytest.task_numbers import TaskNumbers, tell_start
from pytest_rollouts.pytest.workers import Workers
from pytest_rollouts.rows.planned import Plan
from pytest_rollouts.rows.records import RolloutOutcome
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.runlock import OutputBusy

if TYPE_CHECKING:
    from pytest_rollouts.config.agents import Agents
    from pytest_rollouts.config.routing import Routing
    from pytest_rollouts.config.settings import Settings
    from pytest_rollouts.dispatch.lingering import Lingering
    from pytest_rollouts.dispatch.messages import PlanHeader
    from pytest_rollouts.export.tracing import RunTrace
    from pytest_rollouts.lifecycle.stages import RunLifecycle
    from pytest_rollouts.plan.declared import Declarations
    from pytest_rollouts.pytest.progress import Finished, InFlight
    from pytest_rollouts.scoring.output_scan import ReadAhead


class RolloutRun:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.lean = False
        # Why dispatch stopped early (an artifact unwritable, a dispatcher bug or death), or "".
        self.dispatch_failure = ""
        # This session started dispatching (a refusal before any request leaves it False).
        self.dispatched = False
        # Rollouts this process's dispatch sent, those no item reported (``-x``, Ctrl-C) included.
        self.sent = 0
        # Its dispatchers' account of adaptive limits and retries (``dispatch/record.py``).
        self.dispatch_record = DispatchRecord()
        # Rollouts this process's dispatch was handed (for the status file, ``pytest/status.py``).
        self.planned = 0
        # The plan went to the dispatcher: a session stopped from here on says what it covered.
        self._handed_over = False
        # Stops are this run's to handle until pytest unconfigures.
        self.stops = StopHandling()
        config.add_cleanup(self.stops.remove)
        self._stopped = ""
        # Set by the reporter: called on the dispatcher's heartbeat, so progress shows while items wait.
        self.on_heartbeat: Callable[[], None] | None = None
        self._settings: Settings | None = None
        self._agents: Agents | None = None
        self.numbering = TaskNumbers(config, lambda: self.settings, lambda: self.agents)
        self._plan: Plan | None = None
        # The outputs read for scoring while pytest waits (this process dispatching, not an xdist worker).
        self.read_ahead: ReadAhead | None = None
        self._dispatcher: Dispatcher | None = None
        self._engine: subprocess.Popen[bytes] | None = None
        # The dispatcher process once it closed, kept to send the run's ``/aggregate_metrics``.
        self.lingering: Lingering | None = None
        self.workers = Workers(config, lambda: self.paths)
        # The ``job`` span of this process's dispatch, when a tracer provider is set (export/tracing.py).
        self.trace: RunTrace | None = None
        # The live status file (``pytest/status.py``): a session that holds a run takes its hooks.
        config.pluginmanager.register(SessionStatus(config), "rollouts-status")

    @classmethod
    def get(cls, config: pytest.Config) -> RolloutRun:
        run = config.stash.get(RUN_KEY, None)
        if run is None:
            run = config.stash[RUN_KEY] = cls(config)
        return run

    @property
    def settings(self) -> Settings:
        """The options; once datasets are routed, with what the head server's config and the suites
        set for the options not given (``Agents.settings``)."""
        if self._agents is not None:
            return self._agents.settings
        if self._settings is None:
            from pytest_rollouts.pytest.resolve import resolve_settings

            self._settings = resolve_settings(self.config)
        return self._settings

    @property
    def paths(self) -> ArtifactPaths:
        assert self.settings.out is not None
        return self.settings.paths

    def warm_engine(self) -> None:
        """Start the dispatcher process early, so its imports overlap with collection (not for a
        session that will run nothing: ``--co``, ``--help``, ``--fixtures``, ``--markers``)."""
        option = self.config.option
        informational = ("collectonly", "help", "showfixtures", "show_fixtures_per_test", "markers")
        if self._engine is None and not any(getattr(option, name, False) for name in informational):
            self._engine = spawn_engine()

    def configure(self, *, warm: bool) -> None:
        """Fail fast (exit 4) on bad settings or an unreadable head server, before collecting anything.
        ``warm`` (rollouts asked for on the command line): start the dispatcher process now, so its imports
        overlap with collection however few rows there are. Others start it at their first dataset."""
        if warm:
            self.warm_engine()  # first: its imports then overlap with pydantic's in this process
        if self.settings.head_server is not None:
            self.routing_for(self.config.rootpath)  # discovery happens on first use, and may refuse the run
        settings = self.settings
        if settings.drain_margin is not None and settings.dispatch_budget is None:
            from pytest_rollouts.pytest.progress import tell

            tell(self.config, "--rollouts-drain-margin has no effect without --rollouts-dispatch-budget")

    @property
    def agents(self) -> Agents:
        """The agents this run can reach; a head server is asked once, before the first dataset is read."""
        if self._agents is None:
            from pytest_rollouts.config.agents import Agents

            self._agents = Agents(self.settings, self.config.rootpath)
        return self._agents

    @cached_property
    def declarations(self) -> Declarations:
        """Each dataset's split and prompt template, as its suite or the head server declares them."""
        from pytest_rollouts.plan.declared import Declarations

        return Declarations(self.settings, self.agents, self.config.rootpath)

    def routing_for(self, dataset: Path) -> Routing:
        from pytest_rollouts.config.agents import AgentsError

        try:
            return self.agents.routing_for(dataset)
        except AgentsError as exc:
            raise pytest.UsageError(str(exc)) from None

    # -- collection ----------------------------------------------------------------------

    def number_tasks(self, items: list[pytest.Item]) -> None:
        from pytest_rollouts.pytest.items import refuse_missing_head_datasets

        self.numbering.number_tasks(items, lambda: refuse_missing_head_datasets(self.config, self))

    def began(self) -> bool:
        """This session started the run: it dispatched (or was stopped handing the plan over), or its workers did."""
        return self.dispatched or (self._handed_over and not self._stopped) or self.workers.started()

    def holds_no_task(self) -> bool:
        """A shard that none of the dataset's tasks fell to, and whose (empty) artifacts are written."""
        if self.numbering.empty_shard:
            return True
        paths = self.paths
        return (
            self.settings.shard is not None
            and self.workers.started()
            and paths.materialized.exists()
            and paths.materialized.stat().st_size == 0
        )

    @cached_property
    def life(self) -> RunLifecycle:
        """The run's lifecycle in this session: the files it prepares, scores and publishes (an
        xdist worker prepares, but owns nothing of the whole run: its controller decides)."""
        from pytest_rollouts.lifecycle.stages import RunLifecycle

        return RunLifecycle(self.paths, owner=role(self.config).owns_run)

    def prepare(self, items: Sequence[pytest.Item]) -> None:
        """Once collection is final: clear the agents, set up the files and decide exactly what
        will be sent. Every refusal that sends nothing comes before anything is moved."""
        selected = [item for item in items if isinstance(item, RolloutItem)]
        if (not selected and not self.numbering.empty_shard) or self.numbering.refusal:
            return
        for slot, item in enumerate(selected):
            item.slot = slot
        self.lean = len(selected) == len(items)
        paths = self.paths
        this = role(self.config)
        run_id = this.run_id or uuid.uuid4().hex
        try:
            self.life.lock = hold(self.config, paths, run_id, this)  # before anything is moved or sent
            self._plan = self._prepare(selected, run_id)
        except Refusal as refusal:
            self._refuse(refusal)
        except OutputBusy as exc:
            self._refuse(Refusal(str(exc), where="lock"))
        except HealthUnasked as exc:  # the dispatcher process died during the check: nothing was sent
            self._refuse(self.life.refuse(str(exc), exit_status=pytest.ExitCode.INTERNAL_ERROR, where="dispatcher"))
        except OSError as exc:  # a read-only or missing place: nothing was sent
            self._refuse(Refusal(f"cannot write the artifacts next to {paths.out}: {exc}", where="lock"))

    def _prepare(self, selected: list[RolloutItem], run_id: str) -> Plan:
        """The lifecycle's preparation, this session's agents cleared where it says."""
        from pytest_rollouts.plan.build import RowShaping

        settings, agents, life, paths = self.settings, self.agents, self.life, self.paths
        worker = role(self.config).worker
        if not worker:  # a stop during a slow health check ends the session as Ctrl-C does
            self.stops.install()
        clear = partial(life.clear_blocking, settings, agents, recorded=self.numbering.recorded_datasets, ask=self._ask)
        if not self.numbering.resuming:
            clear({item.agent for item in selected})
        assert self.numbering.manifest is not None
        plan = life.prepare(
            selected,
            settings,
            self.numbering.manifest,
            run_id=run_id,
            resuming=self.numbering.resuming,
            shown=self.shown(paths.materialized),
            shaping=RowShaping.of(agents, lambda path: self.declarations.of(path).prompt),
            told=None if worker else partial(tell_start, self.config, out=paths.out),
            recorded=self.numbering.recorded,
        )
        if self.numbering.resuming and plan.rollouts:
            clear({r.agent for r in plan.rollouts})
        return plan

    def _ask(self, header: PlanHeader) -> list[str]:
        """The agents' health as this session's dispatcher process checks it (``pytest/health.py``)."""
        self._engine = self._engine or spawn_engine()
        return ask_health(self._engine, header)

    # -- the run loop --------------------------------------------------------------------

    def start(self, session: pytest.Session) -> None:
        """Begin dispatching the prepared plan to the agents cleared for it."""
        plan, self._plan = self._plan, None
        this = role(self.config)
        # A worker ends with its controller, which takes the signal for it.
        if this.owns_run and (plan is not None or this.controller):
            self.stops.install()
        if plan is None:
            return
        # Items and collection state live until the end; keeping them out of the cyclic
        # collector's reach saves its passes over them during the run.
        gc.freeze()
        paths = self.paths
        self.planned = len(plan.rollouts)
        cleared = self.life.cleared
        urls, models, types = (cleared.urls, cleared.models, cleared.result_types) if cleared else ({}, {}, {})
        model_parallel = self.settings.model_parallel and this.share(self.settings.model_parallel)
        self._dispatcher = Dispatcher(
            plan.rollouts,
            plan.slots,
            urls,
            (paths.materialized, paths.out, paths.failures),
            # The agents' health was checked as they were cleared, before anything was moved.
            self.settings.model_copy(update={"no_health_check": True}),
            prior=plan.prior,
            parallel=this.share(self.settings.parallel),
            worker=this.worker,
            process=self._engine,
            models=models,
            model_parallel=model_parallel,
            result_types=types,
        )
        self._engine = None
        self._dispatcher.on_progress = self._heartbeat
        if this.owns_run:  # xdist workers never score; their controller does
            from pytest_rollouts.scoring.output_scan import OutputScan, ReadAhead

            self.read_ahead = ReadAhead(OutputScan(paths.out, plan.expected), first=self.life.load_scoring)
        from pytest_rollouts.export.tracing import RunTrace

        self.trace = RunTrace.start({"rollouts.out": str(paths.out), "rollouts.planned": len(plan.rollouts)})
        self._handed_over = True
        if self.read_ahead is not None:  # from the plan's sending on: scoring loaded first, then rows read
            self._dispatcher.on_idle = self.read_ahead.step
        try:
            self._dispatcher.start()
        except DispatcherGone as exc:
            self.finish()
            self.dispatch_failure = ""  # a failure before any request, not a run to score
            self._stopped = f"{exc}{self.life.put_back()}"
            if this.owns_run:
                pytest.exit(self._stopped, returncode=pytest.ExitCode.INTERNAL_ERROR)
            return  # see _refuse
        self.dispatched = True
        self.life.sent()

    def put_back_unsent(self) -> str:
        """A fresh run stopped before its first request leaves its files as found, as a refusal does (what to
        tell). Not on an xdist worker (its controller decides), nor after a refusal (it put them back)."""
        if self._stopped or self.dispatched or role(self.config).worker:
            return ""
        return self.life.put_back_unsent()

    def _refuse(self, refusal: Refusal) -> None:
        """Refuse the run before any request: in one process, a usage error (or ``Refused`` with
        its exit status, 2 for unhealthy agents). An xdist worker must not end on its own (its
        controller would see it vanish with items queued, and crash): its first item fails with
        the reason and stops the session (``wait``), and its controller says it, once."""
        why = refusal_said(refusal)
        if role(self.config).worker:
            self._stopped = why
            self.workers.refusal = (why, refusal.exit_status)
            return
        if refusal.exit_status == pytest.ExitCode.USAGE_ERROR:
            raise pytest.UsageError(why)
        self._stopped = why
        raise Refused(why, returncode=refusal.exit_status)

    def wait(self, item: RolloutItem) -> list[RolloutOutcome]:
        if not self._stopped:
            if self._dispatcher is None:
                raise RuntimeError("rollouts were not dispatched in this session")
            try:
                if self._dispatcher.worker:
                    # Its own task first: claimed after the queue's, it waited behind all of them.
                    self._dispatcher.claim([item.slot, *self.workers.queued_slots(item.session.items)])
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
            if self.workers.refusal is not None:  # a worker's refusal: its controller says it, once
                pytest.skip("the run was refused before any request")
            pytest.fail(self._stopped, pytrace=False)
        if self.trace is not None:
            self.trace.rollouts(item.task_index, item.agent, outcomes)
        hook = self.config.hook.pytest_rollouts_task_finished
        if outcomes and hook.get_hookimpls():  # a hook call costs microseconds even with no listener
            hook(item=item, outcomes=outcomes)
        return outcomes

    def _heartbeat(self) -> None:
        if self.on_heartbeat is not None:
            self.on_heartbeat()

    def live(self) -> tuple[InFlight | None, Finished | None]:
        """What this process's dispatcher last reported (None, None when it does not dispatch): requests in flight,
        the oldest's age, task, rollout; and tasks finished, rollouts sent, failures, [p50, p90] latency, masking."""
        dispatcher = self._dispatcher
        return (None, None) if dispatcher is None else (dispatcher.in_flight, dispatcher.finished)

    def live_limits(self) -> dict[str, int]:
        """Each agent's adaptive limit as this process's dispatcher last reported ({} under a fixed parallel)."""
        return {} if self._dispatcher is None else self._dispatcher.limits

    def run_dispatch_record(self) -> DispatchRecord:
        """The whole run's: this process's dispatchers', or on a controller its workers'."""
        return self.workers.dispatch_record if role(self.config).controller else self.dispatch_record

    def finish(self) -> None:
        """Stop dispatch: every artifact is flushed and fsynced after this."""
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None:
            self.lingering = dispatcher.close(linger=self.read_ahead is not None)  # where the run is scored
            self.sent += dispatcher.sent
            self.dispatch_record = self.dispatch_record.merged(dispatcher.record)
            self.dispatch_failure = self.dispatch_failure or dispatcher.failure

    def close(self, *, wait: bool = True) -> str:
        """End the dispatcher process and the embedded agents: both outlive dispatch for ``/aggregate_metrics``.
        Why the dispatcher did not exit, even when killed, or "" (``Lingering.end``, ``wait`` as there)."""
        self.finish()
        unended = "" if self.lingering is None else self.lingering.end(wait=wait)
        if self._engine is not None:
            stop_unused(self._engine)
            self._engine = None
        if self._agents is not None:
            self._agents.close()
        if self.trace is not None:
            self.trace.end()
            self.trace = None
        return unended

    def shown(self, path: Path) -> str:
        return os.path.relpath(path, self.config.invocation_params.dir)
