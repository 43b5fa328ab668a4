"""The dispatcher process: one asyncio loop, one connection pool, every artifact row written here.

pytest runs items one at a time and spends real CPU on each; HTTP and JSON need CPU
too. In one process they would take turns on the GIL, so dispatch runs here, in a
process of its own (``python -m pytest_rollouts.dispatch.engine``), and talks to pytest over
its stdin/stdout in frames (``frames.py``):

- in: a header, the plan's columns, then ``claim`` (pytest waits on a task the
  look-ahead has not reached), ``freed`` (pytest consumed tasks: room to admit more),
  ``close``. End of input (pytest died) closes too, so nothing is left running.
- out: ``ready`` (or ``unhealthy`` with the failed health checks: then nothing is
  sent), ``done`` with a task's outcomes once each of its rows is written,
  ``error`` for a bug that must fail the item rather than hang it, ``fatal`` for a
  bug outside any one rollout (this process then closes), ``closed``.

Rollouts are admitted in plan order while fewer than ``limit`` are resident (admitted,
not yet consumed), and at most ``parallel`` requests are in flight.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import sys
import time
import traceback
from array import array
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson

from pytest_rollouts.net.address import Address
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.store.bodies import Bodies
from pytest_rollouts.dispatch.client import JSON_HEADERS, Attempt, post_run
from pytest_rollouts.pacing import pace_process
from pytest_rollouts.rows.episodes import episode_body, episode_reply
from pytest_rollouts.dispatch.frames import ChannelClosed, FrameBuffer, message, read_frame
from pytest_rollouts.dispatch.health import Unhealthy, check_agents
from pytest_rollouts.net.http1 import Pool, Target
from pytest_rollouts.store.jsonl import ArtifactError, JsonlAppender, dumps, loads, whole_lines
from pytest_rollouts.rows.records import failure_class_of, marked_terminal, reward_of
from pytest_rollouts.rows.schema import (
    ATTEMPT_INDEX,
    CANCELLED,
    ENVIRONMENT_SERVER,
    FAILURE_MESSAGE,
    NO_PERSIST,
    ROLLOUT_INDEX,
    TASK_INDEX,
    agent_failure_row,
    failure_row,
    success_row,
)

MAX_BACKOFF_S = 60.0
SYNC_INTERVAL_S = 1.0
CONNECT_TIMEOUT_S = 30.0
PROGRESS_INTERVAL_S = 2.0
COLUMNS = ("slot", "task", "rollout", "offset", "length", "first_attempt", "agent", "episode")
COLUMN_TYPES = {"agent": "H", "episode": "B"}
# An outcome goes to pytest as a list in ``RolloutOutcome``'s field order; the places read here.
CLASS, DETAIL, ATTEMPTS = 2, 3, 5


class Engine:
    def __init__(self, header: dict[str, Any], columns: dict[str, array], send: Any) -> None:
        self._h = header
        self._col = columns
        self._write = send
        # Reports completed in one turn of the loop go to pytest in one write (and one read there).
        self._outbox: list[bytes] = []
        self._names = header["agents"]
        given: dict[str, dict[str, str]] = header.get("headers", {})
        # Credentials in an agent's URL are a header like the others, kept out of what is written too.
        self._agent_headers = {
            name: Address.parse(header["urls"][name]).with_credentials(given.get(name, {})) for name in self._names
        }
        self._targets = [
            Target.of("POST", header["urls"][name], "/run", {**JSON_HEADERS, **self._agent_headers[name]})
            for name in self._names
        ]
        self._redact = Redactor(self._agent_headers)
        count = len(columns["slot"])
        self._admitted = bytearray(count)
        self._by_slot: dict[int, list[int]] = {}
        for position, slot in enumerate(columns["slot"]):
            self._by_slot.setdefault(slot, []).append(position)
        self._pending = {slot: len(positions) for slot, positions in self._by_slot.items()}
        self._outcomes: dict[int, list[list[Any]]] = {}
        self._cursor = 0
        self._resident = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()
        # The traceback of a bug outside any one rollout: pytest was told, and this process closes.
        self.crashed = ""
        self._in_flight_since: dict[int, float] = {}
        # What has finished, for the progress line: pytest reports items in plan order, so a
        # slow early rollout holds back the report of every task finished after it.
        self._tasks_done = 0
        self._rollouts_sent = 0
        self._failure_counts: Counter[str] = Counter()
        self._bodies = Bodies(Path(header["bodies"]))
        self._outputs = JsonlAppender(Path(header["out"]))
        self._failures = JsonlAppender(Path(header["failures"]))
        self._in_flight = asyncio.Semaphore(header["parallel"])
        # A shorter --rollouts-timeout ends the attempt first (TimeoutError, not retried), as with aiohttp.
        self._pool = Pool(connect_timeout=CONNECT_TIMEOUT_S)
        self._shared = SharedOutput(Path(header["out"])) if header.get("shared_output") else None
        self._deadline = Deadline(header["budget"], header["margin"]) if header.get("budget") else None

    # -- messages from pytest ------------------------------------------------------------

    def handle(self, raw: bytes) -> None:
        kind, *args = orjson.loads(raw)
        if kind == "freed":
            self._resident -= args[0]
            self._admit()
        elif kind == "claim":
            self._claim(args[0])
        elif kind == "close":
            self._closing.set()

    def input_closed(self) -> None:
        self._closing.set()

    # -- the run -------------------------------------------------------------------------

    async def run(self) -> None:
        # The heartbeat starts with the health checks, which may take long: pytest bounds every
        # wait on this process by its silence. Both end at ``close``, whenever it comes.
        self._spawn(self._report_progress())
        self._spawn(self._begin())
        await self._closing.wait()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pool.close()
        self._bodies.close()
        for appender in (self._outputs, self._failures):
            try:
                appender.close()
            except ArtifactError as exc:  # the last second's rows: pytest is told even now
                self.crash(exc)
        self._send(message(["closed"]))

    async def _begin(self) -> None:
        unhealthy = await self._check_health()
        if unhealthy:
            self._send(message(["unhealthy", [u.line() for u in unhealthy]]))
            return
        self._spawn(self._sync_periodically())
        self._send(message(["ready"]))
        self._admit()

    async def _check_health(self) -> list[Unhealthy]:
        health = self._h.get("health")
        if not health:
            return []
        return await check_agents(
            self._pool,
            {name: self._h["urls"][name] for name in self._names},
            self._agent_headers,
            workers=health["workers"],
            ignored=frozenset(health["ignored"]),
            redact=self._redact,
        )

    def _post(self, data: bytes) -> None:
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush_reports)
        self._outbox.append(data)

    def _flush_reports(self) -> None:
        try:
            if self._outbox:
                self._flush_with_progress()
        except Exception as exc:
            self.crash(exc)

    def crash(self, exc: BaseException) -> None:
        """A bug outside any one rollout. asyncio would only log it, and pytest would wait forever
        on reports that never come: tell pytest, then close (rows written so far are kept)."""
        if self.crashed:
            return
        if isinstance(exc, ArtifactError):  # not a bug: the message says it all
            self.crashed = str(exc)
        else:
            self.crashed = "a bug in the dispatcher:\n" + "".join(traceback.format_exception(exc))
        sys.stderr.write(f"pytest-rollouts: dispatch stopped: {self.crashed}\n")
        try:
            # The reports already posted go first: their tasks are done and their rows written.
            self._send(message(["fatal", self.crashed]))
        except Exception:  # the pipe itself failed: pytest sees it close
            pass
        self._closing.set()

    def _flush_with_progress(self) -> None:
        """What is in flight now goes ahead of the reports: pytest reads it first, so the
        progress it shows next to a finished task never names that task's rollouts."""
        self._outbox.insert(0, self._progress())
        self._flush()

    def _flush(self) -> None:
        data, self._outbox = b"".join(self._outbox), []
        self._write(data)

    def _send(self, data: bytes) -> None:
        """Now, after anything posted: for messages pytest must see before the engine goes on (or away)."""
        self._outbox.append(data)
        self._flush()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[None]) -> None:
        """A task of this process that ended by an exception (the fsync or heartbeat loop) is a bug."""
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.crash(task.exception())  # type: ignore[arg-type]

    def _admit(self) -> None:
        if self._closing.is_set():  # after a crash pytest may still send freed and claim
            return
        limit, total = self._h["limit"], len(self._admitted)
        while self._resident < limit and self._cursor < total:
            position = self._cursor
            self._cursor += 1
            if not self._admitted[position]:
                self._start(position)

    def _claim(self, slot: int) -> None:
        """pytest waits on ``slot`` before look-ahead reached it: start it now, over the bound."""
        if self._closing.is_set():
            return
        for position in self._by_slot.get(slot, ()):
            if not self._admitted[position]:
                self._start(position)

    def _start(self, position: int) -> None:
        self._admitted[position] = 1
        self._resident += 1
        self._spawn(self._run(position))

    async def _run(self, position: int) -> None:
        slot = self._col["slot"][position]
        try:
            outcome = self._written_elsewhere(position) or await self._attempts(position)
        except asyncio.CancelledError:
            raise
        except ArtifactError as exc:  # every later row would be lost too
            self.crash(exc)
            return
        except Exception:  # a bug must reach the item, not hang it
            self._pending[slot] = 0
            self._post(message(["error", slot, traceback.format_exc()]))
            return
        outcomes = self._outcomes.setdefault(slot, [])
        outcomes.append(outcome)
        if outcome[ATTEMPTS]:  # not drained, not found on disk
            self._rollouts_sent += 1
        if outcome[CLASS] is not None:
            self._failure_counts[outcome[CLASS]] += 1
        self._pending[slot] -= 1
        if not self._pending[slot]:
            self._tasks_done += 1
            self._post(message(["done", slot, self._outcomes.pop(slot)]))

    def _written_elsewhere(self, position: int) -> list[Any] | None:
        """Under xdist, a task re-queued from a crashed worker may already have rows on disk.

        The shared output is read incrementally (new whole lines only), and a key another
        process already wrote is reported as cached instead of being run twice.
        """
        if self._shared is None:
            return None
        self._shared.refresh()
        key = (self._col["task"][position], self._col["rollout"][position])
        reward = self._shared.rewards.get(key, _ABSENT)
        if reward is _ABSENT:
            return None
        return [key[1], reward, None, "", 0.0, 0, True]

    async def _attempts(self, position: int) -> list[Any]:
        """This run's attempt at a rollout: its first try and up to ``retries`` more after no reply
        or a 429/502/503/504, all carrying the attempt's index, and one row for the whole attempt.

        Resume caps attempts (runs that tried a rollout), so an outage that outlasts one run's
        retries costs that run one attempt, and the next ``--rollouts-resume`` sends it again.
        """
        col = self._col
        rollout_index = col["rollout"][position]
        agent = self._names[col["agent"][position]]
        body = self._bodies.read(col["offset"][position], col["length"][position])
        # An episode row is sent as an episode request built from it, and names no agent.
        episode = loads(body) if col["episode"][position] else None
        stamps: dict[str, Any] = {
            TASK_INDEX: col["task"][position],
            ROLLOUT_INDEX: rollout_index,
            **({ENVIRONMENT_SERVER: agent} if episode is not None else {"agent_ref": {"name": agent}}),
        }
        target = self._targets[col["agent"][position]]
        # The number of earlier runs' failure rows: a first attempt carries no index.
        attempt_index = col["first_attempt"][position]
        if attempt_index:
            stamps[ATTEMPT_INDEX] = attempt_index
        if episode is not None:
            body = episode_body(episode, stamps[TASK_INDEX], rollout_index, attempt_index)
        elif attempt_index:
            body = _with_attempt_index(body, attempt_index)
        # Tries that got no reply: the last one's row stands for the attempt once no retry follows it.
        tries: list[Attempt] = []
        try:
            for number in range(self._h["retries"] + 1):
                async with self._in_flight:
                    # Asked once a request may go out, not at admission: an admitted rollout can wait
                    # behind ``parallel`` others for longer than the whole budget.
                    drained = self._deadline.refuse() if self._deadline is not None else ""
                    if not drained:
                        self._in_flight_since[position] = time.monotonic()
                        try:
                            attempt = await post_run(self._pool, target, body, self._h["timeout"], self._redact)
                        finally:
                            del self._in_flight_since[position]
                if drained:
                    if not tries:
                        return [rollout_index, None, CANCELLED, drained, 0.0, 0]
                    # The try it would have retried stands for the attempt: its row makes resume retry it.
                    failed = self._record(tries.pop(), stamps, rollout_index, tries)
                    failed[DETAIL] += f"; not retried, {drained}"
                    return failed
                failure = attempt.failure
                if failure is not None:
                    if not failure.retryable or number == self._h["retries"]:
                        return self._record(attempt, stamps, rollout_index, tries)
                    tries.append(attempt)
                    await asyncio.sleep(self._backoff(number, failure.retry_after))
                    continue
                if episode is not None and attempt.reply is not None:
                    attempt.reply = episode_reply(attempt.reply, episode["task_id"], self._redact)
                try:
                    # Replies come in bursts (a wave of requests started together). Yielding once
                    # lets the requests waiting on the semaphore go out before this one's row and
                    # report are written: 2000 rollouts at 50 ms, span 1.81-1.88 s -> 1.77-1.78 s.
                    await asyncio.sleep(0)
                finally:
                    # Even when cancelled there (Ctrl-C, -x, close): the reply came, so its row is kept.
                    outcome = self._record(attempt, stamps, rollout_index, tries)
                return outcome
        finally:
            if tries:  # cancelled between tries: the last one that came back stands for the attempt
                self._record(tries.pop(), stamps, rollout_index, tries)
        raise AssertionError("unreachable: the last try always returns")

    def _record(
        self, attempt: Attempt, stamps: dict[str, Any], rollout_index: int, earlier: list[Attempt]
    ) -> list[Any]:
        """Write the attempt's row, its last try's, and return the outcome.

        ``earlier``: the tries before it, summarised in a failure row and emptied, so the attempt
        has one row whatever ends it; a result needs no record of them.
        """
        tries, summary = len(earlier) + 1, earlier[:]
        earlier.clear()
        # A failure written with the last attempt the cap allows: no resume tries it again.
        last = stamps.get(ATTEMPT_INDEX, 0) + 1 >= self._h["max_attempts"]
        reply = attempt.reply
        if reply is None:
            assert attempt.failure is not None
            attempt.failure.message = self._redact(attempt.failure.message) or ""
            self._failures.append(failure_row(attempt.failure, {ATTEMPT_INDEX: 0, **stamps}, attempt.elapsed, summary))
            failure_class = attempt.failure.failure_class
            return [rollout_index, None, failure_class, _detail(attempt), attempt.elapsed, tries, False, last]
        failure_class = failure_class_of(reply)
        if failure_class is not None:
            row = self._redact.row(
                agent_failure_row(reply, {ATTEMPT_INDEX: 0, **stamps}, attempt.elapsed, attempt.http_status, summary)
            )
            persisted = not row.get(NO_PERSIST)
            if persisted:
                self._failures.append(row)
            return [
                rollout_index,
                None,
                failure_class,
                row[FAILURE_MESSAGE],
                attempt.elapsed,
                tries,
                False,
                last and persisted and not marked_terminal(row),
            ]
        # The stamps say which attempt this was, and a first attempt carries no index: one the
        # agent echoed would claim a retry that never happened.
        reply.pop(ATTEMPT_INDEX, None)
        self._outputs.append_line(self._redact.line(success_row(reply, stamps, attempt.elapsed)))
        if self._deadline is not None:
            self._deadline.durations.append(attempt.elapsed)
        return [rollout_index, reward_of(reply), None, "", attempt.elapsed, tries]

    def _backoff(self, number: int, retry_after: float | None) -> float:
        """Before try ``number + 1`` of this run's attempt: it doubles with the tries of this run only."""
        base = self._h["retry_backoff"] * (2**number)
        delay = random.uniform(base / 2, base)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, MAX_BACKOFF_S)

    async def _report_progress(self) -> None:
        """A heartbeat for pytest's progress line while no report comes (a slow rollout)."""
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            self._flush_with_progress()

    def _progress(self) -> bytes:
        """What only this process knows: requests in flight, the oldest one's age and key, and the
        tasks finished, rollouts sent and failures by class so far.

        Requests enter ``_in_flight_since`` as they start and leave as they end, so the first
        entry is the oldest.
        """
        since = self._in_flight_since
        oldest = next(iter(since), None)
        finished = [self._tasks_done, self._rollouts_sent, self._failure_counts]
        if oldest is None:
            return message(["progress", 0, None, None, finished])
        where = [self._col["task"][oldest], self._col["rollout"][oldest]]
        return message(["progress", len(since), time.monotonic() - since[oldest], where, finished])

    async def _sync_periodically(self) -> None:
        """fsync at least once a second: a crash loses at most the last second's rows.

        The materialized inputs are checked as often (on this thread, which closes their file):
        request bodies come from the file this process opened, but scoring and resume read the
        one at its path.
        """
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SYNC_INTERVAL_S)
            self._bodies.check()
            await loop.run_in_executor(None, self._sync)

    def _sync(self) -> None:
        self._outputs.sync()
        self._failures.sync()


_ABSENT = object()


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
        return statistics.quantiles(self.durations, n=4, method="inclusive")[2]

    def refuse(self) -> str:
        """Why a rollout must not start now, or "" when it may."""
        left, margin = self._ends - time.monotonic(), self.margin()
        if left > margin:
            return ""
        return f"dispatch budget: {max(left, 0.0):.1f}s left, a rollout needs {margin:.1f}s"


class SharedOutput:
    """The keys (and rewards) in an output file other processes append to, read as it grows."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self.rewards: dict[tuple[int, int], float | None] = {}

    def refresh(self) -> None:
        data = whole_lines(self._path, self._offset)
        for line in data.splitlines():
            if line.strip():
                row = loads(line)
                self.rewards[(row[TASK_INDEX], row[ROLLOUT_INDEX])] = reward_of(row)
        self._offset += len(data)


def _with_attempt_index(body: bytes, attempt_index: int) -> bytes:
    row = loads(body)
    row[ATTEMPT_INDEX] = attempt_index
    return dumps(row)


def _detail(attempt: Attempt) -> str:
    failure = attempt.failure
    assert failure is not None
    body = f": {failure.body[:200]}" if failure.body else ""
    return f"{failure.message}{body}"


class _Input(asyncio.Protocol):
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._frames = FrameBuffer()

    def data_received(self, data: bytes) -> None:
        try:
            for raw in self._frames.feed(data):
                self._engine.handle(raw)
        except Exception as exc:
            self._engine.crash(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._engine.input_closed()


class _Output(asyncio.Protocol):
    """pytest's end of the pipe. Once pytest is gone (killed, its pipe closed), what the engine
    would tell it is dropped, not raised as a bug, and the run closes: nobody waits for it."""

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self._transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.engine is not None:
            self.engine.input_closed()

    def send(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _read_plan(stdin: Any) -> tuple[dict[str, Any], dict[str, array]] | None:
    """The header and the plan's columns, or None when pytest closed the pipe first (it dispatched
    nothing, or was stopped or killed while sending the plan)."""
    try:
        header = orjson.loads(read_frame(stdin))
        columns = {}
        for name in COLUMNS:
            column = array(COLUMN_TYPES.get(name, "q"))
            column.frombytes(read_frame(stdin))
            columns[name] = column
    except ChannelClosed:
        return None
    return header, columns


async def _serve(stdin: Any, stdout: Any) -> str:
    """Serve one session; what it returns is the traceback of a crash, or ""."""
    plan = _read_plan(stdin)
    if plan is None:
        return ""
    loop = asyncio.get_running_loop()
    _, output = await loop.connect_write_pipe(_Output, stdout)
    engine = output.engine = Engine(*plan, output.send)
    pace_process()
    await loop.connect_read_pipe(lambda: _Input(engine), stdin)
    await engine.run()
    output.close()
    return engine.crashed


def _runner() -> Callable[[Coroutine[Any, Any, str]], str]:
    """uvloop where it installs (Linux, macOS), asyncio's own loop elsewhere.

    Against a fast agent this process's CPU is what bounds throughput, and the same
    work costs 10-25% less of it on uvloop (10k rollouts, four A/B pairs in one
    sitting: 4.1-4.9 s instead of 5.0-5.7 s).
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def main() -> None:
    # pytest decides when dispatch stops, and this process ends with its input whatever ends
    # pytest: signals sent to every process of a job (a scheduler's SIGTERM) are not for it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stdin = os.fdopen(sys.stdin.fileno(), "rb", buffering=0)
    stdout = os.fdopen(sys.stdout.fileno(), "wb", buffering=0)
    crashed = _runner()(_serve(stdin, stdout))
    # Every artifact is written, fsynced and closed, and pytest was told so: tearing the
    # interpreter down would only keep it waiting (0.1 s at 10k rollouts).
    sys.stderr.flush()
    os._exit(1 if crashed else 0)


if __name__ == "__main__":
    main()
