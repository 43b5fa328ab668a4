"""pytest's side of dispatch: start the dispatcher process, feed it the plan, wait on results.

Rollouts run ahead of pytest in ``engine.py``'s process; each item's ``runtest``
blocks only until its own task is reported done. Reading a frame from a pipe releases
the GIL and is interrupted by Ctrl-C, so pytest stays responsive, and the process
ends when its input closes, so a dead pytest leaves nothing running.
"""

from __future__ import annotations

import operator
import select
import subprocess
import time
from array import array
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rollouts.dispatch.frames import ChannelClosed, ChannelStuck, FrameBuffer, write_all
from pytest_rollouts.dispatch.lingering import Lingering
from pytest_rollouts.dispatch.messages import (
    Claim,
    Close,
    Closed,
    Done,
    Error,
    Fatal,
    Freed,
    FromEngine,
    MessageError,
    PlanHeader,
    Progress,
    Ready,
    decode,
    encode,
    encode_column,
)
from pytest_rollouts.dispatch.process import end_process, exit_status, spawn_engine
from pytest_rollouts.dispatch.record import DispatchRecord
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.rows.planned import COLUMNS, PlannedRollouts
from pytest_rollouts.rows.records import RolloutOutcome

if TYPE_CHECKING:
    from pytest_rollouts.config.settings import Settings
    from pytest_rollouts.model.spec import ModelPlan

# pytest reports consumed tasks to the engine in batches: one write per this many
# items keeps the look-ahead window nearly full without a pipe write per item.
FREED_BATCH = 32
# Once it has the plan, the engine writes at least every --rollouts-progress-interval (its
# heartbeat, at most 60 s); before that it takes the plan as fast as
# pytest writes it. This long without a byte either way, it is stuck (a blocked file system, a
# stopped process): pytest fails rather than waits.
SILENCE_LIMIT_S = 120.0
STUCK_GRACE_S = 5.0


class DispatcherError(RuntimeError):
    """Dispatching one task failed: a bug that must fail its item rather than hang it."""


class DispatcherGone(DispatcherError):
    """The dispatcher process failed or went away: no task not reported yet will be.

    Rows it wrote are kept (it fsyncs as it goes, unless the file itself is what was lost), and
    ``--rollouts-resume`` runs what has no row.
    """


class Dispatcher:
    def __init__(
        self,
        rollouts: PlannedRollouts,
        slot_count: int,
        urls: dict[str, str],
        paths: tuple[Path, Path, Path],
        settings: Settings,
        *,
        prior: dict[int, list[RolloutOutcome]] | None = None,
        parallel: int,
        worker: bool = False,
        process: subprocess.Popen[bytes] | None = None,
        models: dict[str, ModelPlan] | None = None,
        model_parallel: int | None = None,
        result_types: dict[str, str] | None = None,
    ) -> None:
        self._rollouts = rollouts
        self._planned, self._last_position = _per_slot(rollouts, slot_count)
        self._prior = prior or {}
        self._urls = urls
        self._bodies, self._out, self._failures = paths
        self._settings = settings
        self._parallel = parallel
        self._models = models or {}
        self._model_parallel = model_parallel
        self._result_types = result_types
        # An xdist worker dispatches only what xdist queued for it (``claim``): looking
        # ahead over the whole plan would run other workers' items.
        self._limit = 0 if worker else settings.resident_limit
        # Public: an xdist worker's items claim its queue too (``pytest/session.py``).
        self.worker = worker
        self._done: dict[int, list[RolloutOutcome] | str] = {}
        # Why the engine is gone, once it is: every later wait on an unreported task fails with it.
        self._gone = ""
        self._claimed: set[int] = set()
        self._freed = 0
        self._freed_sent = 0
        self._claimed_rollouts = 0
        self._proc = process
        # Requests in flight, the oldest one's age and key, and when pytest read that: the engine
        # reports it ahead of each batch of results, and every 2 s while none comes.
        self._in_flight: tuple[Progress, float] | None = None
        # Tasks finished, rollouts sent, failures by class, p50 and p90 latency and the masking counts, as the engine
        # last reported: ahead of the items pytest has reported, which come in plan order behind any slow one.
        self.finished: tuple[int, int, dict[str, int], list[float] | None, MaskingCounts] | None = None
        # Rollouts sent, as last reported; after ``close``, all of them (the engine's last word).
        self.sent = 0
        # The engine's account of how dispatch went (adaptive limits, retries), once it closed.
        self.record = DispatchRecord()
        # Called on each of the engine's progress reports, while pytest waits or reads results.
        self.on_progress: Callable[[], None] | None = None
        # Work for the moments pytest would otherwise block on the engine, called only while
        # no message is there to read, and again while it returns True (more work waiting).
        self.on_idle: Callable[[], bool] | None = None
        self._init_pipe_state()

    def _init_pipe_state(self) -> None:
        """What reading and writing the pipes keeps: buffers, the poller, how far the start got."""
        # Messages received and not handled yet: the engine writes many per read.
        self._received = FrameBuffer()
        self._inbox: deque[bytes] = deque()
        # Tells whether a message is there to read without blocking; without ``poll`` (Windows)
        # there is no idle work and no watch on silence.
        self._poller: Any = None
        # Whether the engine has the whole plan: until then a ``close`` message would be read as
        # part of it, so closing its input is the only way to stop it.
        self._plan_sent = False
        self._ready = False
        self._stuck = False

    def start(self) -> None:
        # Sent as columns, then let go: the plan is the engine's to hold, not pytest's.
        rollouts, self._rollouts = self._rollouts, PlannedRollouts()
        agents = sorted(rollouts.agents())
        header = PlanHeader.of(
            self._settings,
            {name: self._urls[name] for name in agents},
            parallel=self._parallel,
            limit=self._limit,
            paths=(str(self._bodies), str(self._out), str(self._failures)),
            shared_output=self.worker,
            models=self._models,
            model_parallel=self._model_parallel,
            result_types=self._result_types,
        )
        columns = [_column(rollouts, name, agents) for name in COLUMNS]
        del rollouts
        if self._proc is None:
            self._proc = spawn_engine()
        self._write(encode(header) + b"".join(map(encode_column, columns)))
        self._plan_sent = True
        while isinstance(reply := self._read(), Progress):
            pass
        if isinstance(reply, Fatal):  # it could not even read the plan (a pytest and an engine that disagree)
            self._stop(reply.why)
            raise DispatcherGone(self._gone)
        if not isinstance(reply, Ready):
            raise DispatcherError("the dispatcher process did not start")
        self._ready = True

    def wait(self, slot: int) -> list[RolloutOutcome]:
        """Block until every rollout of ``slot`` finished (settled ones come from ``prior``)."""
        settled = self._prior.get(slot, [])
        if self._planned[slot]:
            while slot not in self._done:
                if self._gone:
                    raise DispatcherGone(self._gone)
                if slot not in self._claimed and not self._surely_admitted(slot):
                    self._claimed.add(slot)
                    self._claimed_rollouts += self._planned[slot]
                    self._write(encode(Claim(slot)))
                self._store(self._read())
            result = self._done.pop(slot)
            self._freed += self._planned[slot]
            if (self._freed >= FREED_BATCH or self._freed >= self._limit) and not self._gone:
                try:
                    self._write(encode(Freed(self._freed)))
                except DispatcherGone:
                    pass  # this task's result is in hand; the next wait reports why dispatch stopped
                self._freed_sent += self._freed
                self._freed = 0
            if isinstance(result, str):
                raise DispatcherError(f"dispatching task slot {slot} failed:\n{result}")
            settled = settled + result
        return sorted(settled, key=_BY_ROLLOUT)

    def claim(self, slots: list[int]) -> None:
        """Start these tasks now (an xdist worker's queue): one write for all of them."""
        fresh = [slot for slot in slots if self._planned[slot] and slot not in self._claimed]
        if fresh:
            self._claimed.update(fresh)
            self._claimed_rollouts += sum(self._planned[slot] for slot in fresh)
            self._write(b"".join(encode(Claim(slot)) for slot in fresh))

    def _stop(self, why: str) -> None:
        """The first reason dispatch stopped is the one reported."""
        self._gone = self._gone or f"dispatch stopped: {why}\n--rollouts-resume runs what has no row yet."

    @property
    def failure(self) -> str:
        """Why dispatch stopped before its end, or "" (known once the engine said so, or went away)."""
        return self._gone

    @property
    def in_flight(self) -> tuple[int, float | None, list[int] | None] | None:
        """As the engine last reported, the oldest request's age brought up to now."""
        if self._in_flight is None:
            return None
        progress, read_at = self._in_flight
        age = progress.oldest_age
        return progress.in_flight, None if age is None else age + time.monotonic() - read_at, progress.oldest

    @property
    def limits(self) -> dict[str, int]:
        """Each agent's adaptive limit, as the engine last reported ({} under a fixed ``parallel``)."""
        return {} if self._in_flight is None else self._in_flight[0].limits

    def _surely_admitted(self, slot: int) -> bool:
        """Whether the engine's look-ahead has certainly started ``slot``, so no claim is needed.

        The engine admits in plan order while fewer than ``limit`` are resident; claimed
        rollouts count as resident without moving its cursor, hence the subtraction.
        """
        return self._last_position[slot] < self._limit + self._freed_sent - self._claimed_rollouts

    def close(self, *, linger: bool = False) -> Lingering | None:
        """Cancel whatever still runs; the engine flushes and fsyncs the artifacts and says ``Closed``.
        With ``linger``, a process that closed cleanly is kept (and returned) to send the run's
        ``/aggregate_metrics``; otherwise it is ended here."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if not self._plan_sent:
            # Stopped before the whole plan went out (Ctrl-C, an error building it): the engine has
            # opened no artifact and sent nothing, and it may be still starting or stopped itself.
            proc.kill()
        lingering = None
        try:
            if self._plan_sent:
                self._write_to(proc, encode(Close()))
                while not self._stuck:
                    msg = self._read_from(proc)
                    if isinstance(msg, Closed):
                        self.sent, self.record = msg.rollouts_sent, msg.record
                        lingering = Lingering(proc) if linger and not self.failure else None
                        break
                    if isinstance(msg, Fatal):  # its last writes failed: the run must not pass as whole
                        self._stop(msg.why)
        except ChannelStuck as exc:  # its last fsync may not have happened: not a whole run
            self._stuck = True
            self._stop(str(exc))
        except (ChannelClosed, BrokenPipeError, OSError):
            pass
        finally:
            if lingering is None and (why := end_process(proc, stuck=self._stuck)):
                self._stop(why)
        return lingering

    def _store(self, msg: FromEngine) -> None:
        if isinstance(msg, Done):
            self._done[msg.slot] = msg.outcomes
        elif isinstance(msg, Progress):
            self._in_flight = (msg, time.monotonic())
            self.finished = (msg.tasks_done, msg.rollouts_sent, msg.failures, msg.latency, msg.masking)
            self.sent = msg.rollouts_sent
            if self.on_progress is not None and self._ready:
                self.on_progress()
        elif isinstance(msg, Fatal):
            self._stop(msg.why)
        elif isinstance(msg, Error):
            self._done[msg.slot] = msg.traceback
        elif not isinstance(msg, Closed):  # its last words, read after it failed (see _read_last_words)
            raise MessageError(f"message {msg.tag!r} is not one the engine sends while it runs")

    def _write(self, data: bytes) -> None:
        assert self._proc is not None
        try:
            self._write_to(self._proc, data)
        except ChannelStuck:
            self._stuck = True
            self._stop(f"the dispatcher process took nothing for {SILENCE_LIMIT_S:.0f} s: it is stuck and was stopped")
            raise DispatcherGone(self._gone) from None
        except (BrokenPipeError, OSError) as exc:
            self._read_last_words()
            self._stop(f"the dispatcher process went away ({exc})")
            raise DispatcherGone(self._gone) from None

    def _read_last_words(self) -> None:
        """An engine that failed sends why (``fatal``) before it goes: read what it left in the pipe,
        so that reason, not the broken pipe it caused, is the one reported."""
        assert self._proc is not None
        try:
            while self._inbox or not self._nothing_to_read(self._proc.stdout.fileno()):  # type: ignore[union-attr]
                self._store(self._read_from(self._proc))
        except (ChannelClosed, OSError):
            pass

    def _read(self) -> FromEngine:
        assert self._proc is not None
        try:
            return self._read_from(self._proc, self.on_idle)
        except ChannelStuck as exc:
            self._stuck = True
            self._stop(str(exc))
            raise DispatcherGone(self._gone) from None
        except ChannelClosed:
            self._stop(f"the dispatcher process exited ({exit_status(self._proc)})")
            raise DispatcherGone(self._gone) from None

    @staticmethod
    def _write_to(proc: subprocess.Popen[bytes], data: bytes) -> None:
        assert proc.stdin is not None
        write_all(proc.stdin.fileno(), data, SILENCE_LIMIT_S)

    def _read_from(self, proc: subprocess.Popen[bytes], idle: Callable[[], bool] | None = None) -> FromEngine:
        """The engine's next message; ``idle`` work fills the wait while none has arrived."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while not self._inbox:
            if idle is not None and self._nothing_to_read(fd) and idle():
                continue
            if self._silent(fd, SILENCE_LIMIT_S):
                raise ChannelStuck(
                    f"the dispatcher process sent nothing for {SILENCE_LIMIT_S:.0f} s: it is stuck "
                    "(a blocked file system? a stopped process?) and was stopped"
                )
            self._inbox.extend(self._received.read(fd))
        msg = decode(self._inbox.popleft())
        if not isinstance(msg, FromEngine):
            raise MessageError(f"message {msg.tag!r} is not one the engine sends")
        return msg

    def _silent(self, fd: int, limit_s: float) -> bool:
        """Nothing for ``limit_s``, and still nothing for two heartbeats more. A poll resumed after
        both processes were suspended (Ctrl-Z, a scheduler's pause) returns at once when its
        deadline passed meanwhile: the second wait gives the resumed engine time to speak."""
        return self._nothing_to_read(fd, limit_s) and self._nothing_to_read(fd, STUCK_GRACE_S)

    def _nothing_to_read(self, fd: int, wait_s: float = 0.0) -> bool:
        """Still nothing after ``wait_s`` (an end of input counts as something to read)."""
        if self._poller is None:
            if not hasattr(select, "poll"):
                return False
            self._poller = select.poll()
            self._poller.register(fd, select.POLLIN)
        return not self._poller.poll(wait_s * 1000)


def _per_slot(rollouts: PlannedRollouts, slot_count: int) -> tuple[list[int], list[int]]:
    """Each task slot's planned rollouts, and the plan position of its last one."""
    planned, last_position = [0] * slot_count, [0] * slot_count
    for position, slot in enumerate(rollouts.column("slot")):
        planned[slot] += 1
        last_position[slot] = position
    return planned, last_position


def _column(rollouts: PlannedRollouts, name: str, agents: list[str]) -> array:
    """One of the plan's columns as the engine takes it: an agent as its position in ``agents``
    (the header's), not in the plan's own list of names."""
    column = rollouts.column(name)
    if name != "agent":
        return column
    codes = [agents.index(agent) for agent in rollouts.agent_names]
    return array(column.typecode, map(codes.__getitem__, column))


# An outcome's rollout index, read in C: a key function in Python is a call per outcome.
_BY_ROLLOUT = operator.attrgetter("rollout_index")
