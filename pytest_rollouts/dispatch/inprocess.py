"""Dispatch in the caller's own event loop: a plan's rollouts, bounded, and cancelled as a whole.

The dispatcher process (``engine.py``) exists so that pytest's per-item work and the HTTP work
take two cores. A trainer or a script that uses the Python API has its own event loop and no
pytest, so its rollouts run in that loop instead, on the same attempts (``attempts.py``):

- ``LocalDispatch``: one ``PlanHeader``'s connection pool and attempts (health checks, at most
  ``parallel`` requests in flight, retries, the dispatch budget), and the one stream of rollouts
  started on them. ``aclose`` cancels whatever is in flight, waits for it to end, and closes
  the pool, so nothing is left running in the caller's loop.
- ``Completions``: that stream: rollout tasks started while fewer than ``limit`` are resident
  (started, not yet taken by the caller), taken in the order they finish.
- ``dispatch_plan``: a whole plan, its rows written to the run's files as the dispatcher process
  writes them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import field
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

from pytest_rollouts.datatype import datatype
from pytest_rollouts.dispatch.agents import CONNECT_TIMEOUT_S, PlanAgents
from pytest_rollouts.dispatch.artifact_rows import FileRows, sync_periodically
from pytest_rollouts.dispatch.attempts import Attempts, PlannedAttempt
from pytest_rollouts.dispatch.health import refusal_text
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.dispatch.record import DispatchRecord
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import Pool
from pytest_rollouts.rows.planned import Key, PlannedRollout
from pytest_rollouts.rows.records import RolloutOutcome
from pytest_rollouts.rows.schema import CANCELLED
from pytest_rollouts.store.bodies import Bodies
from pytest_rollouts.store.jsonl import ArtifactError

R = TypeVar("R")


class HealthCheckFailed(Exception):
    """Agents failed their health check, and nothing was sent to any agent.

    ``lines``: one per agent, naming it, its address and its reply, as the plugin shows them.
    """

    def __init__(self, lines: list[str]) -> None:
        turn_off = "Fix or restart them, or turn the check off (no_health_check) or ignore a check (health_ignore)."
        super().__init__(refusal_text(lines, "nothing was sent", turn_off))
        self.lines = lines


class Completions(Generic[R]):
    """The results of rollout tasks in the order they finish; at most ``limit`` tasks are resident.

    A task is resident from its start until the caller takes its result, so a caller that stops
    taking stops new starts: memory holds at most ``limit`` results however long ``work`` is. The
    next coroutine is drawn from ``work`` only when there is room. A rollout task's exception (a
    bug, or an artifact that cannot be written) is raised where its result would have been taken;
    so is an exception ``work`` raised, or one given to ``fail``, at the next take.
    """

    def __init__(self, work: Iterator[Coroutine[Any, Any, R]], limit: int) -> None:
        self._work = work
        self._limit = limit
        self._resident: set[asyncio.Task[R]] = set()
        self._done: deque[asyncio.Task[R]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._drawn_all = False
        self._closed = False

    def __aiter__(self) -> Completions[R]:
        return self

    async def __anext__(self) -> R:
        self._fill()
        while not self._done and self._error is None:
            if not self._resident:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._error is not None:
            raise self._error
        task = self._done.popleft()
        self._resident.discard(task)
        self._fill()  # the room just made goes to the next rollout while the caller handles this one
        return task.result()

    def fail(self, error: BaseException) -> None:
        """End the stream: the next take raises ``error`` (the caller then closes it)."""
        if self._error is None:
            self._error = error
        self._wake()

    async def close(self) -> None:
        """Cancel every resident task and wait until each has ended; start none after."""
        self._closed = True
        resident = list(self._resident)
        for task in resident:
            task.cancel()
        # Their exceptions are retrieved here, so none is logged as never retrieved.
        await asyncio.gather(*resident, return_exceptions=True)
        self._resident.clear()
        self._done.clear()

    def _fill(self) -> None:
        if self._closed or self._error is not None:
            return
        loop = asyncio.get_running_loop()
        while not self._drawn_all and len(self._resident) < self._limit:
            try:
                coro = next(self._work)
            except StopIteration:
                self._drawn_all = True
                return
            except Exception as exc:  # the caller's rows: raised at the next take
                self.fail(exc)
                return
            task = loop.create_task(coro)
            self._resident.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[R]) -> None:
        if not self._closed:
            self._done.append(task)
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class LocalDispatch:
    """One plan's pool and attempts in the running loop; use as ``async with``, which closes it."""

    def __init__(self, header: PlanHeader) -> None:
        if header.limit < 1:
            raise ValueError(f"dispatch in process needs a resident limit of at least 1, not {header.limit}")
        self.header = header
        self.agents = PlanAgents.of(header)
        self._pool = Pool(connect_timeout=CONNECT_TIMEOUT_S)
        # The dispatch budget's clock starts here, health checks included, as in the dispatcher process.
        self.attempts = Attempts(header, self.agents.senders(self._pool), self.agents.redact)
        self._stream: Completions[Any] | None = None

    async def __aenter__(self) -> LocalDispatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def check_health(self) -> None:
        """``HealthCheckFailed`` unless every agent the plan checks is healthy."""
        unhealthy = await self.agents.unhealthy(self._pool)
        if unhealthy:
            raise HealthCheckFailed([u.line() for u in unhealthy])

    def stream(self, work: Iterator[Coroutine[Any, Any, R]]) -> Completions[R]:
        """Start ``work``'s rollouts, at most ``header.limit`` resident; one stream per dispatch."""
        if self._stream is not None:
            raise RuntimeError("a LocalDispatch runs one stream of rollouts")
        stream: Completions[R] = Completions(work, self.header.limit)
        self._stream = stream
        return stream

    async def aclose(self) -> None:
        """Cancel what is in flight, wait for it to end, then close every connection."""
        try:
            if self._stream is not None:
                await self._stream.close()
        finally:
            self._pool.close()


@datatype(slots=True)
class PlanResult:
    """What ``dispatch_plan`` did; each outcome went to its ``on_outcome`` as it ended."""

    # The rollouts the dispatch budget never started (outcome ``cancelled``, no row anywhere).
    drained: list[Key] = field(default_factory=list)
    # Why dispatch stopped before the end of the plan (an ``ArtifactError``'s message), or "".
    stopped: str = ""
    # Each adaptive limit over time and the retries sent and refused, for the metrics file.
    record: DispatchRecord = field(default_factory=DispatchRecord)


async def dispatch_plan(
    header: PlanHeader,
    rollouts: Iterable[PlannedRollout],
    on_outcome: Callable[[PlannedRollout, RolloutOutcome], None],
    watch: Callable[[Attempts], None] | None = None,
) -> PlanResult:
    """Dispatch ``rollouts`` in the running event loop, writing their rows as the dispatcher process does.

    ``header`` is the dispatcher process's (``shared_output`` must be false): ``urls`` and ``agents``
    (each rollout's ``agent`` is one of them), ``bodies`` (the materialized inputs that each
    rollout's ``offset`` and ``length`` point into), ``out`` and ``failures`` (appended to, never
    truncated), ``parallel`` requests in flight, at most ``limit`` (>= 1) rollouts started and not
    finished, in the order given, and ``timeout``, ``retries``, ``retry_backoff``, ``max_attempts``,
    ``budget``, ``margin``, ``headers`` and ``health`` as the plugin's options of those names.

    - Health checks first, when ``header.health`` asks for them: ``HealthCheckFailed`` (its
      ``lines`` say which agents and why) when one fails; then nothing was sent or written.
    - Each attempt's row is written the moment it ends, the same bytes the dispatcher process
      writes; both files are fsynced at least once a second, and once more at the end.
    - An artifact that cannot be written or read (disk full, a file removed or replaced, the
      materialized inputs changed) stops dispatch: what is in flight is cancelled and the result
      says why in ``stopped``; the rows written so far are kept.
    - Cancelling the call cancels what is in flight (a rollout whose reply came still writes its
      row), fsyncs and closes the files, closes every connection, and re-raises.
    - Any other exception is a bug: dispatch ends as on a cancel, and it propagates.

    Each outcome is handed to ``on_outcome`` as its rollout ends and none is kept: a run of a
    million rollouts holds what is in flight, not an outcome for each. ``watch`` is handed the
    attempts once, before any is sent: a live status reads their requests in flight
    (``in_flight_since``: each rollout's position in ``rollouts``, by the monotonic time it was
    sent, oldest first) and each agent's adaptive limit (``live_limits``). The result's ``record``
    says how dispatch went (adaptive limits over time, retries).
    """
    if header.shared_output:
        raise ValueError("shared_output is for xdist workers' dispatcher processes, not dispatch in process")
    async with LocalDispatch(header) as dispatch:
        if watch is not None:
            watch(dispatch.attempts)
        await dispatch.check_health()
        bodies, rows = _open(header, dispatch.agents.redact)
        stream = dispatch.stream(_attempts(dispatch, bodies, rows, rollouts))
        syncing = asyncio.get_running_loop().create_task(sync_periodically(rows.sync, bodies))
        syncing.add_done_callback(partial(_stop_when_failed, stream))
        result = PlanResult()
        try:
            await _take(stream, on_outcome, result)
        except ArtifactError as exc:
            result.stopped = str(exc)
        finally:
            syncing.cancel()
            await dispatch.aclose()  # before the files close: a reply that came still writes its row
            result.record = dispatch.attempts.record()
            await asyncio.gather(syncing, return_exceptions=True)
            bodies.close()
            try:
                rows.close()
            except ArtifactError as exc:
                result.stopped = result.stopped or str(exc)
        return result


Ended = tuple[PlannedRollout, RolloutOutcome]


def _open(header: PlanHeader, redact: Redactor) -> tuple[Bodies, FileRows]:
    """The materialized inputs to read bodies from and the files rows go to, both open or neither."""
    bodies = Bodies(Path(header.bodies))
    try:
        return bodies, FileRows(Path(header.out), Path(header.failures), redact)
    except BaseException:
        bodies.close()
        raise


def _attempts(
    dispatch: LocalDispatch, bodies: Bodies, rows: FileRows, rollouts: Iterable[PlannedRollout]
) -> Iterator[Coroutine[Any, Any, Ended]]:
    """One coroutine per rollout, in plan order, its body read from the materialized inputs."""
    index = {name: position for position, name in enumerate(dispatch.header.agents)}

    async def one(position: int, rollout: PlannedRollout) -> Ended:
        body = bodies.read(rollout.offset, rollout.length)
        planned = PlannedAttempt(
            position,
            rollout.task_index,
            rollout.rollout_index,
            index[rollout.agent],
            body,
            rollout.first_attempt,
            rollout.episode,
            rollout.via_server,
        )
        return rollout, await dispatch.attempts.run(planned, rows)

    return (one(position, rollout) for position, rollout in enumerate(rollouts))


async def _take(
    stream: Completions[Ended], on_outcome: Callable[[PlannedRollout, RolloutOutcome], None], result: PlanResult
) -> None:
    """Hand each ended rollout to ``on_outcome``; note the ones the budget drained."""
    async for rollout, outcome in stream:
        on_outcome(rollout, outcome)
        if outcome.failure_class == CANCELLED and not outcome.attempts:
            result.drained.append((rollout.task_index, rollout.rollout_index))


def _stop_when_failed(stream: Completions[Any], task: asyncio.Task[None]) -> None:
    """The fsync loop ends only by an error (or a cancel): dispatch stops with it."""
    if not task.cancelled() and (error := task.exception()) is not None:
        stream.fail(error)
