"""The dispatcher process: one asyncio loop, one connection pool, every artifact row written here.

pytest runs items one at a time and spends real CPU on each; HTTP and JSON need CPU
too. In one process they would take turns on the GIL, so dispatch runs here, in a
process of its own (``python -m pytest_rollouts.dispatch.engine``), and talks to pytest over
its stdin/stdout in the typed messages of ``messages.py``:

- in: health checks, then the plan (``intake.py``), then ``Claim`` (pytest waits on a task the
  look-ahead has not reached), ``Freed`` (pytest consumed tasks: room to admit more),
  ``Close``. End of input (pytest died) closes too, so nothing is left running. After
  ``Closed``, ``PostMetrics`` until the input ends (``metrics_relay.py``).
- out: ``Ready``, ``Done`` with a task's outcomes once each of its rows is written,
  ``Error`` for a bug that must fail the item rather than hang it, ``Fatal`` for a
  bug outside any one rollout (this process then closes), ``Closed``; ``Progress``
  ahead of each batch of those and every 2 s.

Rollouts are admitted in plan order while fewer than ``limit`` are resident (admitted,
not yet consumed); ``attempts.py`` runs each one, at most ``parallel`` requests in flight.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import traceback
from array import array
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from pytest_rollouts.dispatch.agents import CONNECT_TIMEOUT_S, PlanAgents
from pytest_rollouts.dispatch.artifact_rows import FileRows, sync_periodically
from pytest_rollouts.dispatch.attempts import Attempts, PlannedAttempt
from pytest_rollouts.dispatch.frames import write_all
from pytest_rollouts.dispatch.intake import read_plan
from pytest_rollouts.dispatch.latency import LatencySketch
from pytest_rollouts.dispatch.messages import (
    Claim,
    Close,
    Closed,
    Done,
    Error,
    Fatal,
    Freed,
    MessageError,
    PlanHeader,
    Progress,
    Ready,
    decode,
    encode,
)
from pytest_rollouts.dispatch.metrics_relay import Relay
from pytest_rollouts.dispatch.pipes import Input, Output
from pytest_rollouts.dispatch.shared_output import SharedOutput
from pytest_rollouts.net.http1 import Pool
from pytest_rollouts.pacing import pace_process
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.rows.records import RolloutOutcome
from pytest_rollouts.store.bodies import Bodies
from pytest_rollouts.store.jsonl import ArtifactError


class Engine:
    def __init__(self, header: PlanHeader, columns: dict[str, array], send: Any) -> None:
        self._h = header
        self._col = columns
        self._write = send
        # Reports completed in one turn of the loop go to pytest in one write (and one read there).
        self._outbox: list[bytes] = []
        self._agents = PlanAgents.of(header)
        count = len(columns["slot"])
        self._admitted = bytearray(count)
        self._by_slot, self._starts = _grouped_by_slot(columns["slot"])
        # Each slot's rollouts not reported yet.
        self._pending = array("q", map(int.__sub__, self._starts[1:], self._starts[:-1]))
        self._outcomes: dict[int, list[RolloutOutcome]] = {}
        self._cursor = 0
        self._resident = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()
        # The traceback of a bug outside any one rollout: pytest was told, and this process closes.
        self.crashed = ""
        # What has finished, for the progress line: pytest reports items in plan order, so a
        # slow early rollout holds back the report of every task finished after it.
        self._tasks_done = 0
        self._rollouts_sent = 0
        self._latency = LatencySketch()
        self._failure_counts: Counter[str] = Counter()
        self._masking = MaskingCounts()
        self._bodies = Bodies(Path(header.bodies))
        self._rows = FileRows(Path(header.out), Path(header.failures), self._agents.redact)
        self._pool = Pool(connect_timeout=CONNECT_TIMEOUT_S)
        self._attempts = Attempts(header, self._agents.senders(self._pool), self._agents.redact, self._started)
        self._shared = SharedOutput(Path(header.out)) if header.shared_output else None

    # -- messages from pytest ------------------------------------------------------------

    def handle(self, raw: bytes) -> None:
        msg = decode(raw)
        if isinstance(msg, Freed):
            self._resident -= msg.count
            self._admit()
        elif isinstance(msg, Claim):
            self._claim(msg.slot)
        elif isinstance(msg, Close):
            self._closing.set()
        else:
            raise MessageError(f"message {msg.tag!r} is not one pytest sends")

    def input_closed(self) -> None:
        self._closing.set()

    # -- the run -------------------------------------------------------------------------

    async def run(self) -> None:
        # pytest bounds every wait on this process by its silence: the heartbeat starts at once.
        # Both end at ``close``, whenever it comes.
        self._spawn(self._report_progress())
        self._spawn(self._begin())
        await self._closing.wait()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pool.close()
        self._bodies.close()
        try:
            self._rows.close()
        except ArtifactError as exc:  # the last second's rows: pytest is told even now
            self.crash(exc)
        record = self._attempts.record()
        self._send(encode(Closed(self._rollouts_sent, record.limits, record.retries, record.retries_refused)))

    async def _begin(self) -> None:
        """Start dispatching. The agents' health was checked before any file was moved (for a pytest
        session by this process, asked before the plan: ``intake.py``), so the plan asks for none."""
        self._spawn(sync_periodically(self._sync, self._bodies))
        self._send(encode(Ready()))
        self._admit()

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
            self._send(encode(Fatal(self.crashed)))
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
        limit, total = self._h.limit, len(self._admitted)
        while self._resident < limit and self._cursor < total:
            position = self._cursor
            self._cursor += 1
            if not self._admitted[position]:
                self._start(position)

    def _claim(self, slot: int) -> None:
        """pytest waits on ``slot`` before look-ahead reached it: start it now, over the bound."""
        if self._closing.is_set():
            return
        if not 0 <= slot < len(self._pending):
            return
        for position in self._by_slot[self._starts[slot] : self._starts[slot + 1]]:
            if not self._admitted[position]:
                self._start(position, first=True)

    def _start(self, position: int, *, first: bool = False) -> None:
        """Admit ``position``: its task starts once a request slot is free (``request_slots.py``)."""
        self._admitted[position] = 1
        self._resident += 1
        self._attempts.slots.admit(position, first=first)

    def _started(self, position: int) -> None:
        """``_spawn``'s task, its slot held. None once closing: a slot freed by a cancelled request
        must not send another."""
        if self._closing.is_set():
            return
        task = asyncio.get_running_loop().create_task(self._run(position))
        self._tasks.add(task)
        task.add_done_callback(self._reap)

    async def _run(self, position: int) -> None:
        slot = self._col["slot"][position]
        held = True  # the request slot this task was started with, until ``run`` takes it over
        try:
            outcome = None if self._shared is None else self._written_elsewhere(position)
            if outcome is None:
                planned = self._planned(position)
                held = False
                outcome = await self._attempts.run(planned, self._rows, holding=True)
        except asyncio.CancelledError:
            raise
        except ArtifactError as exc:  # every later row would be lost too
            self.crash(exc)
            return
        except Exception:  # a bug must reach the item, not hang it
            self._pending[slot] = 0
            self._post(encode(Error(slot, traceback.format_exc())))
            return
        finally:
            if held:  # found on disk, or its body unreadable: the slot is free again
                self._attempts.slots.release()
        outcomes = self._outcomes.setdefault(slot, [])
        outcomes.append(outcome)
        if outcome.attempts:  # not drained, not found on disk
            self._rollouts_sent += 1
            self._latency.add(outcome.elapsed)
        self._masking.add(outcome)
        status = outcome.status  # a failure class, or no_reward: what the gate counts as failed
        if status is not None:
            self._failure_counts[status] += 1
        self._pending[slot] -= 1
        if not self._pending[slot]:
            self._tasks_done += 1
            self._post(encode(Done(slot, self._outcomes.pop(slot))))

    def _planned(self, position: int) -> PlannedAttempt:
        col = self._col
        return PlannedAttempt(
            position,
            col["task"][position],
            col["rollout"][position],
            col["agent"][position],
            self._bodies.read(col["offset"][position], col["length"][position]),
            col["first_attempt"][position],
            bool(col["episode"][position]),
            bool(col["via_server"][position]),
        )

    def _written_elsewhere(self, position: int) -> RolloutOutcome | None:
        """Under xdist, a task re-queued from a crashed worker may already have rows on disk."""
        assert self._shared is not None
        return self._shared.outcome(self._col["task"][position], self._col["rollout"][position])

    async def _report_progress(self) -> None:
        """A heartbeat for pytest's progress line while no report comes (a slow rollout)."""
        while True:
            await asyncio.sleep(self._h.progress_interval)
            self._flush_with_progress()

    def _progress(self) -> bytes:
        """What only this process knows: requests in flight, the oldest one's age and key, and the
        tasks finished, rollouts sent and failures by class so far, and each agent's adaptive limit.

        Requests enter ``in_flight_since`` as they start and leave as they end, so the first
        entry is the oldest.
        """
        since = self._attempts.in_flight_since
        oldest = next(iter(since), None)
        done, sent, failures, masking = self._tasks_done, self._rollouts_sent, self._failure_counts, self._masking
        latency, limits = self._latency.p50_p90(), self._attempts.live_limits()
        if oldest is None:
            return encode(Progress(0, None, None, done, sent, failures, latency, masking, limits))
        where = [self._col["task"][oldest], self._col["rollout"][oldest]]
        age = time.monotonic() - since[oldest]
        return encode(Progress(len(since), age, where, done, sent, failures, latency, masking, limits))

    def _sync(self) -> None:
        self._rows.sync()


def _grouped_by_slot(slots: array) -> tuple[array, array]:
    """The plan's positions grouped by task slot, in plan order within each, and where each slot's
    group starts (slot s: ``positions[starts[s] : starts[s + 1]]``): 8 bytes a rollout, where a
    dict of lists of ints took some 50 (a million rollouts: 50 MB)."""
    starts = array("q", bytes(8 * (max(slots, default=-1) + 2)))
    for slot in slots:
        starts[slot + 1] += 1
    for slot in range(len(starts) - 1):
        starts[slot + 1] += starts[slot]
    positions, end = array("q", bytes(8 * len(slots))), starts[:-1]
    for position, slot in enumerate(slots):
        positions[end[slot]] = position
        end[slot] += 1
    return positions, starts


async def _serve(stdin: Any, stdout: Any) -> str:
    """Serve one session; what it returns is the traceback of a crash, or ""."""
    try:
        plan = await read_plan(stdin, stdout)
    except MessageError as exc:  # pytest and this process disagree on the plan: say how, then stop
        why = f"the dispatcher could not read the plan: {exc}"
        write_all(stdout.fileno(), encode(Fatal(why)))
        return why
    if plan is None:
        return ""
    loop = asyncio.get_running_loop()
    _, output = await loop.connect_write_pipe(Output, stdout)
    engine = output.receiver = Engine(*plan, output.send)
    pace_process()
    _, pipe = await loop.connect_read_pipe(lambda: Input(engine), stdin)
    await engine.run()
    crashed = engine.crashed
    if not (crashed or pipe.closed or output.closed):  # pytest may still ask for its /aggregate_metrics
        relay = pipe.receiver = output.receiver = Relay(output.send)
        del engine, plan  # let go of the plan and the engine's state (arrays per rollout) while it relays
        await relay.serve()
    output.close()
    return crashed


def _run(serve: Coroutine[Any, Any, str]) -> str:
    """``serve`` run on uvloop where it installs (Linux, macOS), asyncio's own loop elsewhere.

    Against a fast agent this process's CPU is what bounds throughput, and the same
    work costs 10-25% less of it on uvloop (10k rollouts, four A/B pairs in one
    sitting: 4.1-4.9 s instead of 5.0-5.7 s).

    The loop is left as it is, not torn down: the process exits next (``main``), and cancelling
    what is left and closing the loop would only keep pytest waiting for that exit.
    """
    try:
        import uvloop
    except ImportError:
        loop = asyncio.new_event_loop()
    else:
        loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop.run_until_complete(serve)


def main() -> None:
    # pytest decides when dispatch stops, and this process ends with its input whatever ends
    # pytest: signals sent to every process of a job (a scheduler's SIGTERM) are not for it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stdin = os.fdopen(sys.stdin.fileno(), "rb", buffering=0)
    stdout = os.fdopen(sys.stdout.fileno(), "wb", buffering=0)
    crashed = _run(_serve(stdin, stdout))
    # Every artifact is written, fsynced and closed, and pytest was told so: tearing the
    # interpreter down would only keep it waiting (0.1 s at 10k rollouts).
    sys.stderr.flush()
    os._exit(1 if crashed else 0)


if __name__ == "__main__":
    main()
