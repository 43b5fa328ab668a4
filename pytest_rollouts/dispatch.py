"""Run rollouts ahead of pytest: a background thread with its own asyncio loop and one HTTP session.

pytest runs one item at a time, so the dispatcher admits rollouts in the order the
items will run, keeps up to ``parallel`` requests in flight, and lets each item's
``runtest`` block only on its own rollouts. Residency (admitted but not yet reported
rollouts) is bounded so a huge dataset never sits in memory at once. The loop thread
owns every asyncio object; pytest's thread only touches a lock-guarded dict of
finished tasks and schedules callbacks with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from .client import FAILURE_CLASS, Attempt, post_run
from .jsonl import JsonlAppender
from .preprocess import ATTEMPT_INDEX, ROLLOUT_INDEX, TASK_INDEX
from .records import (
    NO_PERSIST,
    RolloutOutcome,
    agent_failure_row,
    failure_row,
    reward_of,
    success_row,
)
from .settings import Settings

MAX_BACKOFF_S = 60.0
SYNC_INTERVAL_S = 1.0


@dataclass(slots=True)
class PlannedRollout:
    """One materialized rollout: its identity and where its request body sits on disk."""

    slot: int
    task_index: int
    rollout_index: int
    agent: str
    offset: int
    length: int
    first_attempt: int = 0
    admitted: bool = False


class DispatcherError(RuntimeError):
    """The dispatcher thread stopped while pytest was still waiting on it."""


class Dispatcher:
    def __init__(
        self,
        rollouts: list[PlannedRollout],
        slot_count: int,
        urls: dict[str, str],
        bodies_path: Path,
        outputs: JsonlAppender,
        failures: JsonlAppender,
        settings: Settings,
        *,
        prior: dict[int, list[RolloutOutcome]] | None = None,
        lookahead: bool = True,
    ) -> None:
        self._rollouts = rollouts
        self._by_slot: list[list[int]] = [[] for _ in range(slot_count)]
        for position, rollout in enumerate(rollouts):
            self._by_slot[rollout.slot].append(position)
        self._pending = [len(positions) for positions in self._by_slot]
        self._outcomes: dict[int, list[RolloutOutcome]] = dict(prior or {})
        self._done: dict[int, list[RolloutOutcome] | BaseException] = {
            slot: sorted(self._outcomes.pop(slot, []), key=_by_rollout)
            for slot, pending in enumerate(self._pending)
            if not pending
        }
        self._urls = {name: url + "/run" for name, url in urls.items()}
        self._bodies_fd = os.open(bodies_path, os.O_RDONLY)
        self._outputs = outputs
        self._failures = failures
        self._settings = settings
        self._limit = settings.resident_limit if lookahead else 0
        self._timeout = aiohttp.ClientTimeout(total=settings.timeout, sock_connect=min(settings.timeout, 30.0))
        self._cursor = 0
        self._resident = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._cond = threading.Condition()
        self._waiting = -1
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._in_flight: asyncio.Semaphore | None = None
        self.started_at = 0.0
        self.finished_at = 0.0
        self.completed = 0

    # -- pytest's thread ---------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._thread_main, name="rollouts-dispatch", daemon=True)
        self._thread.start()
        self._ready.wait()

    def wait(self, slot: int) -> list[RolloutOutcome]:
        """Block until every rollout of ``slot`` finished; then free its residency."""
        loop = self._loop
        assert loop is not None and self._thread is not None
        positions = self._by_slot[slot]
        if not all(self._rollouts[p].admitted for p in positions):
            loop.call_soon_threadsafe(self._claim, slot)
        with self._cond:
            self._waiting = slot
            while slot not in self._done:
                if not self._thread.is_alive():
                    raise DispatcherError("the rollouts dispatcher thread died")
                self._cond.wait(1.0)
            result = self._done.pop(slot)
            self._waiting = -1
        loop.call_soon_threadsafe(self._release, len(positions))
        if isinstance(result, BaseException):
            raise result
        return result

    def close(self) -> None:
        """Cancel whatever still runs, flush and fsync the artifacts, stop the thread."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        os.close(self._bodies_fd)
        self._outputs.close()
        self._failures.close()

    # -- the loop thread ---------------------------------------------------------------

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._open())
            self._ready.set()
            loop.run_forever()
        finally:
            self._ready.set()
            loop.close()

    async def _open(self) -> None:
        parallel = self._settings.parallel
        connector = aiohttp.TCPConnector(limit=parallel, limit_per_host=0)
        self._session = aiohttp.ClientSession(connector=connector, skip_auto_headers=("User-Agent",))
        self._in_flight = asyncio.Semaphore(parallel)
        self._spawn(self._sync_periodically())
        self.started_at = time.perf_counter()
        self._admit()

    async def _shutdown(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        assert self._loop is not None
        await self._loop.shutdown_default_executor()

    def _spawn(self, coro: Any) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _admit(self) -> None:
        rollouts = self._rollouts
        while self._resident < self._limit and self._cursor < len(rollouts):
            rollout = rollouts[self._cursor]
            self._cursor += 1
            if not rollout.admitted:
                self._start(rollout)

    def _claim(self, slot: int) -> None:
        """pytest waits on ``slot`` before look-ahead reached it: start it now, over the bound."""
        for position in self._by_slot[slot]:
            rollout = self._rollouts[position]
            if not rollout.admitted:
                self._start(rollout)

    def _release(self, count: int) -> None:
        self._resident -= count
        self._admit()

    def _start(self, rollout: PlannedRollout) -> None:
        rollout.admitted = True
        self._resident += 1
        self._spawn(self._run(rollout))

    async def _run(self, rollout: PlannedRollout) -> None:
        try:
            outcome: RolloutOutcome | BaseException = await self._attempts(rollout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must reach the item, not hang it
            outcome = exc
        self._finish(rollout, outcome)

    async def _attempts(self, rollout: PlannedRollout) -> RolloutOutcome:
        assert self._session is not None and self._in_flight is not None
        body = os.pread(self._bodies_fd, rollout.length, rollout.offset)
        stamps: dict[str, Any] = {
            TASK_INDEX: rollout.task_index,
            ROLLOUT_INDEX: rollout.rollout_index,
            "agent_ref": {"name": rollout.agent},
        }
        url = self._urls[rollout.agent]
        # In-run retries and earlier runs' attempts share one cap per rollout.
        last = min(rollout.first_attempt + self._settings.retries, self._settings.max_attempts - 1)
        for attempt_index in range(rollout.first_attempt, last + 1):
            if attempt_index:
                stamps[ATTEMPT_INDEX] = attempt_index
                body = _with_attempt_index(body, attempt_index)
            async with self._in_flight:
                attempt = await post_run(self._session, url, body, self._timeout)
            outcome = self._record(attempt, stamps, rollout.rollout_index, attempt_index + 1)
            if outcome is not None:
                return outcome
            failure = attempt.failure
            assert failure is not None
            if not failure.retryable or attempt_index == last:
                return RolloutOutcome(
                    rollout.rollout_index,
                    None,
                    failure.failure_class,
                    _detail(attempt),
                    attempt.elapsed,
                    attempt_index + 1,
                )
            await asyncio.sleep(self._backoff(attempt_index, failure.retry_after))
        raise AssertionError("unreachable: the last attempt always returns")

    def _record(
        self, attempt: Attempt, stamps: dict[str, Any], rollout_index: int, attempts: int
    ) -> RolloutOutcome | None:
        """Write the attempt's row; return the outcome unless the attempt should be retried."""
        reply = attempt.reply
        if reply is None:
            assert attempt.failure is not None
            self._failures.append(failure_row(attempt.failure, {ATTEMPT_INDEX: 0, **stamps}, attempt.elapsed))
            return None
        if FAILURE_CLASS in reply:
            row = agent_failure_row(reply, {ATTEMPT_INDEX: 0, **stamps}, attempt.elapsed, attempt.http_status)
            if not row.get(NO_PERSIST):
                self._failures.append(row)
            return RolloutOutcome(
                rollout_index, None, str(reply[FAILURE_CLASS]), row["_ng_failure_message"], attempt.elapsed, attempts
            )
        self._outputs.append(success_row(reply, stamps, attempt.elapsed))
        return RolloutOutcome(rollout_index, reward_of(reply), None, "", attempt.elapsed, attempts)

    def _backoff(self, attempt_index: int, retry_after: float | None) -> float:
        base = self._settings.retry_backoff * (2**attempt_index)
        delay = random.uniform(base / 2, base)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, MAX_BACKOFF_S)

    def _finish(self, rollout: PlannedRollout, outcome: RolloutOutcome | BaseException) -> None:
        slot = rollout.slot
        self.completed += 1
        self.finished_at = time.perf_counter()
        if isinstance(outcome, BaseException):
            result: list[RolloutOutcome] | BaseException = outcome
            self._pending[slot] = 0
        else:
            outcomes = self._outcomes.setdefault(slot, [])
            outcomes.append(outcome)
            self._pending[slot] -= 1
            if self._pending[slot]:
                return
            result = sorted(self._outcomes.pop(slot), key=_by_rollout)
        with self._cond:
            self._done[slot] = result
            if self._waiting == slot:
                self._cond.notify()

    async def _sync_periodically(self) -> None:
        """fsync at least once a second: a crash loses at most the last second's rows."""
        assert self._loop is not None
        while True:
            await asyncio.sleep(SYNC_INTERVAL_S)
            await self._loop.run_in_executor(None, self._sync)

    def _sync(self) -> None:
        self._outputs.sync()
        self._failures.sync()


def _by_rollout(outcome: RolloutOutcome) -> int:
    return outcome.rollout_index


def _with_attempt_index(body: bytes, attempt_index: int) -> bytes:
    row = orjson.loads(body)
    row[ATTEMPT_INDEX] = attempt_index
    return orjson.dumps(row)


def _detail(attempt: Attempt) -> str:
    failure = attempt.failure
    assert failure is not None
    body = f": {failure.body[:200]}" if failure.body else ""
    return f"{failure.message}{body}"
