"""One rollout's attempt in this run: its HTTP tries, the one row it leaves, and its outcome.

An attempt is one run's dispatch of a rollout; resume caps attempts. Within it, a try that
got no reply (or a 429/502/503/504) is tried again, all tries carrying the attempt's index,
and whatever ends the attempt (a reply, the last try, the dispatch budget, a cancel) writes
exactly one row: a result, or a failure. Where it goes is the caller's ``Rows``: the run's
files (``artifact_rows.FileRows``), or the caller itself (``run_examples``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pytest_rollouts.datatype import datatype
from pytest_rollouts.dispatch.agents import Sender
from pytest_rollouts.dispatch.client import Attempt, Failure
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.dispatch.record import DispatchRecord
from pytest_rollouts.dispatch.request_slots import RequestSlots
from pytest_rollouts.dispatch.retry_budget import RetryBudget
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.retry import backoff_delay
from pytest_rollouts.rows.episodes import episode_body, episode_reply
from pytest_rollouts.rows.records import RolloutOutcome, failure_class_of, marked_terminal
from pytest_rollouts.rows.schema import (
    AGENT_REQUEST_FAILED,
    ATTEMPT_INDEX,
    CANCELLED,
    ENVIRONMENT_SERVER,
    FAILURE_CLASS,
    FAILURE_MESSAGE,
    JUDGE_INVALID,
    RESULT_TYPE,
    ROLLOUT_INDEX,
    TASK_INDEX,
    agent_failure_row,
    as_judge_invalid,
    drained_row,
    failure_row,
    judged_invalid,
    persisted,
)
from pytest_rollouts.store.jsonl import dumps, loads

if TYPE_CHECKING:  # the dispatcher loads adaptive limits only for a run that asks for them
    from pytest_rollouts.dispatch.concurrency import AdaptiveLimit


@datatype(slots=True)
class PlannedAttempt:
    """One rollout as the plan gives it: its identity, its request body, and its earlier attempts.

    Built once per rollout and never changed, yet not ``frozen``: a frozen dataclass sets each
    field through ``object.__setattr__``, four times the cost of building this one."""

    position: int
    task: int
    rollout: int
    agent: int
    body: bytes
    # The number of earlier runs' failure rows: a first attempt carries no index.
    first_attempt: int
    # An episode row is sent as an episode request built from it, and names no agent.
    episode: bool
    # A flat row sent through an environment server: stamped with it, its agent_ref kept.
    via_server: bool = False


class Rows(Protocol):
    """Where an attempt's one row goes.

    A seam rather than two files, so the same attempts serve the dispatcher, which writes rows
    to disk and keeps only their outcome, and an in-process caller that wants the rows back.
    """

    def result(self, reply: dict[str, Any], stamps: dict[str, Any], elapsed: float) -> None:
        """The attempt got a reply that is a result: ``reply`` as the agent sent it, and the stamps
        and wall time a stored row adds to it (``schema.success_row``)."""

    def failure(self, row: dict[str, Any]) -> None:
        """The attempt produced no score: its failure row, redacted. A row ``schema.persisted``
        refuses (an agent's ``_ng_no_persist``, a rollout the budget drained) is written nowhere."""


class Attempts:
    """Runs attempts at most ``parallel`` requests at a time and hands each one's row to ``Rows``.

    With ``adaptive``, each agent's requests are held under its own limit as well (``concurrency.py``);
    with retries, every retry is spent from the run's one budget (``retry_budget.py``)."""

    def __init__(
        self, header: PlanHeader, senders: list[Sender], redact: Redactor, start: Callable[[int], None] | None = None
    ) -> None:
        """``start``: how a rollout admitted through ``slots`` begins (its task's ``run`` holding a slot)."""
        self._h = header
        self._senders = senders
        self._redact = redact
        self.slots = RequestSlots(header.parallel, start)
        # Requests enter as they start and leave as they end, so the first entry is the oldest.
        self.in_flight_since: dict[int, float] = {}
        self._deadline = Deadline(header.budget, header.margin) if header.budget else None
        # A try's send time is read off the monotonic clock (as ``in_flight_since`` needs it);
        # this turns it into wall-clock time for its outcome's ``started``.
        self._to_wall = time.time() - time.monotonic()
        began = time.monotonic()
        self._limits: list[AdaptiveLimit] | None = None
        if header.adaptive:
            from pytest_rollouts.dispatch.concurrency import AdaptiveLimit

            self._limits = [AdaptiveLimit(a, header.parallel, began) for a in header.agents]
        self._budget = RetryBudget(header.retry_budget) if header.retries else None
        # By agent (the plan's ``agent`` column): retries sent, and those the budget refused.
        self._retried: Counter[int] = Counter()
        self._refused: Counter[int] = Counter()

    def record(self) -> DispatchRecord:
        """Each adaptive limit's history, and each agent's retries sent and refused so far."""
        agents = self._h.agents
        return DispatchRecord(
            [limit.series() for limit in self._limits or ()],
            {agents[i]: n for i, n in sorted(self._retried.items())},
            {agents[i]: n for i, n in sorted(self._refused.items())},
        )

    def live_limits(self) -> dict[str, int]:
        """Each agent's adaptive limit now, for the live status ({} under a fixed ``parallel``, which
        is the limit then). A dict built anew, so another thread may read it."""
        return {limit.agent: int(limit.limit) for limit in self._limits or ()}

    async def run(self, planned: PlannedAttempt, rows: Rows, *, holding: bool = False) -> RolloutOutcome:
        """This run's attempt at a rollout: its first try and up to ``retries`` more after no reply
        or a 429/502/503/504 (while the retry budget lasts), all carrying the attempt's index, and
        one row for the whole attempt. ``holding``: a slot is held for its first try (``slots.admit``).

        Resume caps attempts (runs that tried a rollout), so an outage that outlasts one run's
        retries costs that run one attempt, and the next ``--rollouts-resume`` sends it again.
        """
        try:
            body, stamps, episode = self._prepared(planned)
        except BaseException:
            if holding:
                self.slots.release()
            raise
        # Tries that got no reply: the last one's row stands for the attempt once no retry follows it.
        # A stop between tries leaves the attempt unfinished, as a stop in flight does: no row, no cap spent.
        tries: list[Attempt] = []
        limit = self._limits[planned.agent] if self._limits is not None else None
        for number in range(self._h.retries + 1):
            # The try is awaited here rather than in a coroutine of its own: every resumption of
            # a rollout's task runs through each frame it awaits in.
            attempt: Attempt | str = ""
            if limit is not None or not holding:
                await self._slot_for(limit, holding)
            holding = False
            try:
                # Asked once a request may go out, not at admission: an admitted rollout can wait
                # behind ``parallel`` others for longer than the whole budget.
                attempt = self._deadline.refuse() if self._deadline is not None else ""
                if not attempt:
                    sent = self._going(planned.position, number)
                    try:
                        attempt = await self._senders[planned.agent](body)
                    finally:
                        del self.in_flight_since[planned.position]
                    attempt.sent = sent
            finally:
                self.slots.release()
                if limit is not None:
                    _adapt(limit, attempt)
            if isinstance(attempt, str):
                return self._drained(rows, attempt, stamps, planned.rollout, tries)
            failure = attempt.failure
            if failure is None:
                if episode is not None and attempt.reply is not None:
                    attempt.reply = episode_reply(attempt.reply, episode["task_id"], self._redact)
                try:
                    # Replies come in bursts (a wave of requests started together). Yielding once
                    # lets the requests waiting for a slot go out before this one's row and
                    # report are written: 2000 rollouts at 50 ms, span 1.81-1.88 s -> 1.77-1.78 s.
                    await asyncio.sleep(0)
                finally:
                    # Even when cancelled there (Ctrl-C, -x, close): the reply came, so its row is kept.
                    outcome = self._record(rows, attempt, stamps, planned.rollout, tries)
                return outcome
            if not failure.retryable or number == self._h.retries or not self._retry_allowed(failure, planned.agent):
                return self._record(rows, attempt, stamps, planned.rollout, tries)
            tries.append(attempt)
            await asyncio.sleep(backoff_delay(self._h.retry_backoff, number, failure.retry_after))
        raise AssertionError("unreachable: the last try always returns")

    async def _slot_for(self, limit: AdaptiveLimit | None, holding: bool) -> None:
        """A request slot, and room under the agent's adaptive limit (which then adapts to how the
        try went). A slot held while the agent has no room is given back for the wait: the agent's
        rollouts must not hold every slot while other agents have room."""
        if limit is None:
            if not holding:
                await self.slots.acquire()
            return
        if holding and not limit.has_room():
            self.slots.release()
            holding = False
        try:
            await limit.acquire()
        except BaseException:
            if holding:
                self.slots.release()
            raise
        if not holding:
            try:
                await self.slots.acquire()
            except BaseException:
                _adapt(limit, "")
                raise

    def _prepared(self, planned: PlannedAttempt) -> tuple[bytes, dict[str, Any], dict[str, Any] | None]:
        """The request body every try sends, the stamps the attempt's row carries, and the episode
        row (an episode is sent as an episode request built from it)."""
        agent = self._h.agents[planned.agent]
        body = planned.body
        episode = loads(body) if planned.episode else None
        stamps: dict[str, Any] = {TASK_INDEX: planned.task, ROLLOUT_INDEX: planned.rollout}
        if episode is None and not planned.via_server:
            stamps["agent_ref"] = {"name": agent}
        else:
            # Through an environment server: it, and its type when the head server's config gives one.
            stamps[ENVIRONMENT_SERVER] = agent
            if agent in self._h.result_types:
                stamps[RESULT_TYPE] = self._h.result_types[agent]
            ref = loads(body).get("agent_ref") if episode is None else None
            if ref is not None:  # a flat row keeps the agent it names, if any
                stamps["agent_ref"] = ref
        attempt_index = planned.first_attempt
        if attempt_index:
            stamps[ATTEMPT_INDEX] = attempt_index
        if episode is not None:
            body = episode_body(episode, planned.task, planned.rollout, attempt_index)
        elif attempt_index:
            body = _with_attempt_index(body, attempt_index)
        return body, stamps, episode

    def _going(self, position: int, number: int) -> float:
        """A try goes out now: it is in flight, and a first one earns the retry budget its share."""
        self.in_flight_since[position] = sent = time.monotonic()
        if not number and self._budget is not None:
            self._budget.sent(sent)
        return sent

    def _retry_allowed(self, failure: Failure, agent: int) -> bool:
        """Whether the run's retry budget has a retry left; if not, the failure says so."""
        if self._budget is None or self._budget.allow():
            self._retried[agent] += 1
            return True
        self._refused[agent] += 1
        failure.message += "; not retried: the run's retry budget is spent (--rollouts-retry-budget)"
        return False

    def _drained(
        self, rows: Rows, drained: str, stamps: dict[str, Any], rollout_index: int, tries: list[Attempt]
    ) -> RolloutOutcome:
        """The dispatch budget ran out before a try: a first one leaves a drained row (not persisted);
        a retry's, the try it would have retried stands for the attempt, so resume retries it."""
        if not tries:
            rows.failure(drained_row({ATTEMPT_INDEX: 0, **stamps}, drained))
            return RolloutOutcome(rollout_index, None, CANCELLED, drained, 0.0, 0, persisted=False)
        failed = self._record(rows, tries.pop(), stamps, rollout_index, tries)
        failed.detail += f"; not retried, {drained}"
        return failed

    def _record(
        self, rows: Rows, attempt: Attempt, stamps: dict[str, Any], rollout_index: int, earlier: list[Attempt]
    ) -> RolloutOutcome:
        """Hand on the attempt's row, its last try's, and return the outcome.

        ``earlier``: the tries before it, summarised in a failure row and emptied, so the attempt
        has one row whatever ends it; a result needs no record of them.
        """
        tries, summary = len(earlier) + 1, earlier[:]
        earlier.clear()
        started = attempt.sent + self._to_wall
        # A failure written with the last attempt the cap allows: no resume tries it again.
        last = stamps.get(ATTEMPT_INDEX, 0) + 1 >= self._h.max_attempts
        reply = attempt.reply
        if reply is None:
            failure = attempt.failure
            assert failure is not None
            failure.message = self._redact(failure.message) or ""
            rows.failure(failure_row(failure, {ATTEMPT_INDEX: 0, **stamps}, attempt.elapsed, summary))
            return RolloutOutcome(
                rollout_index,
                None,
                failure.failure_class,
                _detail(failure),
                attempt.elapsed,
                tries,
                given_up=last,
                started=started,
            )
        failure_class = failure_class_of(reply)
        if failure_class is None and self._h.retry_invalid_judge and judged_invalid(reply):
            reply, failure_class = as_judge_invalid(reply), JUDGE_INVALID
        if failure_class is not None:
            row = self._redact.row(
                agent_failure_row(reply, {ATTEMPT_INDEX: 0, **stamps}, attempt.elapsed, attempt.http_status, summary)
            )
            rows.failure(row)
            given_up = last and persisted(row) and not marked_terminal(row)
            return RolloutOutcome(
                rollout_index,
                None,
                row[FAILURE_CLASS],  # redacted as the row is: an agent may name its class after a header it got
                row[FAILURE_MESSAGE],
                attempt.elapsed,
                tries,
                given_up=given_up,
                persisted=persisted(row),
                started=started,
            )
        rows.result(reply, stamps, attempt.elapsed)
        if self._deadline is not None:
            self._deadline.durations.append(attempt.elapsed)
        return RolloutOutcome.of_result(rollout_index, reply, attempt.elapsed, tries, started=started)


def _adapt(limit: AdaptiveLimit, attempt: Attempt | str) -> None:
    """Release an adaptive limit after a try; a drained or cancelled one says nothing of the agent."""
    if isinstance(attempt, str):
        limit.release(None, 0.0, overloaded=False)
    else:
        failure = attempt.failure
        overloaded = failure is not None and failure.failure_class == AGENT_REQUEST_FAILED
        limit.release(attempt.sent, attempt.elapsed, overloaded)


class Deadline:
    """The dispatch budget: stop starting rollouts that could not finish before it runs out.

    A job scheduler will kill the allocation soon after the budget; a rollout started
    too late would be killed part-way, its cost wasted. Not starting it leaves no row,
    which is exactly what makes the next ``--rollouts-resume`` run it.
    """

    MIN_DURATIONS = 5

    def __init__(self, budget: float, margin: float | None) -> None:
        self._ends = time.monotonic() + budget
        self._margin = margin
        self.durations: list[float] = []

    def margin(self) -> float:
        """An explicit margin wins; otherwise this run's own p75, once enough rollouts finished."""
        if self._margin is not None:
            return self._margin
        if len(self.durations) < self.MIN_DURATIONS:
            return 0.0
        import statistics  # only a run with a dispatch budget gets here: not every dispatcher's start-up

        return statistics.quantiles(self.durations, n=4, method="inclusive")[2]

    def refuse(self) -> str:
        """Why a rollout must not start now, or "" when it may."""
        left, margin = self._ends - time.monotonic(), self.margin()
        if left > margin:
            return ""
        if left <= 0:
            return "dispatch budget: none left"
        return f"dispatch budget: {left:.1f}s left, less than a rollout takes ({margin:.1f}s)"


def _with_attempt_index(body: bytes, attempt_index: int) -> bytes:
    row = loads(body)
    row[ATTEMPT_INDEX] = attempt_index
    return dumps(row)


def _detail(failure: Failure) -> str:
    body = f": {failure.body[:200]}" if failure.body else ""
    return f"{failure.message}{body}"
