"""Rows a caller holds, run in its own event loop: the dispatch behind ``run_examples``.

Each row is sent as given (``preprocess_examples`` stamps rows as a run does): to the agent its
``agent_ref.name`` names or, for an episode row or a flat row of legacy routing, to the environment
server stamped on it (or, for a flat row, given for every flat row: NeMo Gym's
``environment_server_name``), with the retries, bounds and budget of the plan. What comes back for
a row is exactly the agent's reply (an episode's ``result``, as a run stores it), or the row the
failures sidecar would hold, with the ``_ng_failure_*`` fields: a rollout's failure is data, never
an exception that would end the rollouts still in flight. Nothing is written to disk.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_rollouts.dispatch.attempts import PlannedAttempt
from pytest_rollouts.dispatch.inprocess import Completions, LocalDispatch
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.rows.episodes import taskset_of
from pytest_rollouts.rows.records import metrics_group
from pytest_rollouts.rows.schema import ATTEMPT_INDEX, ENVIRONMENT_SERVER, ROLLOUT_INDEX, TASK_INDEX
from pytest_rollouts.store.artifacts import is_index
from pytest_rollouts.store.jsonl import dumps

WHERE = "run_examples"
# A row handed back with its result, or with its failure row.
Pair = tuple[Mapping[str, Any], dict[str, Any]]


class ExampleRun:
    """``async with`` it: the health checks run, then it is an async iterator of ``(row, result)``
    pairs in completion order; leaving the block cancels whatever is still in flight.

    A ``Sequence`` of rows is checked whole here, before anything is sent; any other iterable is
    read only as rollouts start (so memory stays flat however many rows it yields), each row
    checked as it is read: a bad one ends the iteration with ``ValueError``.
    """

    def __init__(
        self, header: PlanHeader, rows: Iterable[Mapping[str, Any]], environment_server: str | None = None
    ) -> None:
        self._header = header
        self._rows = rows
        self._server = environment_server
        self._agents = {name: position for position, name in enumerate(header.agents)}
        if isinstance(rows, Sequence):
            for position, row in enumerate(rows):
                self._identity(position, row)
        self._dispatch: LocalDispatch | None = None

    async def __aenter__(self) -> Completions[Pair]:
        if self._dispatch is not None:
            raise RuntimeError(f"{WHERE}(...) runs once: call it again for another block")
        dispatch = self._dispatch = LocalDispatch(self._header)
        try:
            await dispatch.check_health()
        except BaseException:
            await dispatch.aclose()
            raise
        return dispatch.stream(self._start(position, row) for position, row in enumerate(self._rows))

    async def __aexit__(self, *exc: object) -> None:
        assert self._dispatch is not None
        await self._dispatch.aclose()

    def __aiter__(self) -> None:
        """Iterated without its block, nothing would cancel what is in flight when the loop ends."""
        raise TypeError(f"{WHERE}(...) is used with async with: async with {WHERE}(...) as results: async for ...")

    def _start(self, position: int, row: Mapping[str, Any]) -> Any:
        """The coroutine that runs ``row``, once it is checked and its request body made."""
        task, rollout, agent, episode, via_server = self._identity(position, row)
        # Sent stamped as a run's materialized row is; handed back as the caller gave it.
        server = self._unstamped(row, via_server)
        sent = row if server is None else {**row, ENVIRONMENT_SERVER: server}
        try:
            body = dumps(sent)
        except TypeError as exc:
            raise ValueError(f"{WHERE}: row {position} is not JSON: {exc}") from None
        first_attempt = row.get(ATTEMPT_INDEX)
        if not is_index(first_attempt):  # a row that names no attempt is a first attempt
            first_attempt = 0
        return self._run(row, PlannedAttempt(position, task, rollout, agent, body, first_attempt, episode, via_server))

    async def _run(self, row: Mapping[str, Any], planned: PlannedAttempt) -> Pair:
        kept = _Kept()
        assert self._dispatch is not None
        await self._dispatch.attempts.run(planned, kept)
        assert kept.row is not None, "an attempt that ends hands on one row"
        return row, kept.row

    def _unstamped(self, row: Mapping[str, Any], via_server: bool) -> str | None:
        """The environment server a flat row goes to when the row itself does not name it."""
        return self._server if via_server and not row.get(ENVIRONMENT_SERVER) else None

    def _identity(self, position: int, row: Mapping[str, Any]) -> tuple[int, int, int, bool, bool]:
        """The row's task and rollout indices, its agent's position, whether it is an episode and
        whether it is a flat row sent to an environment server; ``ValueError`` naming the row for
        one that cannot be sent as it is."""
        if not isinstance(row, Mapping):
            raise ValueError(f"{WHERE}: row {position} is a {type(row).__name__}, not a mapping")
        task, rollout = row.get(TASK_INDEX), row.get(ROLLOUT_INDEX)
        if not is_index(task) or not is_index(rollout):
            raise ValueError(
                f"{WHERE}: row {position} has no {TASK_INDEX} and {ROLLOUT_INDEX} (whole numbers from 0): "
                "stamp the rows with preprocess_examples first"
            )
        episode = taskset_of(row) is not None
        via_server = not episode and (bool(row.get(ENVIRONMENT_SERVER)) or self._server is not None)
        agent = self._unstamped(row, via_server) or metrics_group(row)
        if not agent:
            raise ValueError(
                f"{WHERE}: row {position} names no agent (agent_ref.name, or {ENVIRONMENT_SERVER} on an episode row)"
            )
        if agent not in self._agents:
            known = ", ".join(sorted(self._agents))
            raise ValueError(f"{WHERE}: row {position} names agent {agent!r}, which is not in agents ({known})")
        return task, rollout, self._agents[agent], episode, via_server


class _Kept:
    """The ``Rows`` of one rollout: its one row, kept for the caller instead of written."""

    __slots__ = ("row",)

    def __init__(self) -> None:
        self.row: dict[str, Any] | None = None

    def result(self, reply: dict[str, Any], stamps: dict[str, Any], elapsed: float) -> None:
        self.row = reply

    def failure(self, row: dict[str, Any]) -> None:
        self.row = row
