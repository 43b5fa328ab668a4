"""The bound on requests in flight: rollouts wait for a slot as positions, not as parked tasks."""

from __future__ import annotations

import asyncio
import io
from array import array
from pathlib import Path

import orjson
import pytest

from pytest_rollouts.dispatch.frames import read_frame
from pytest_rollouts.dispatch.messages import Claim, encode
from pytest_rollouts.dispatch.request_slots import RequestSlots
from pytest_rollouts.rows.planned import COLUMNS
from tests.agents import ScriptedAgent
from tests.helpers import plan_header, read_rows

pytestmark = pytest.mark.asyncio


async def test_positions_start_only_as_slots_free_and_claims_go_first() -> None:
    started: list[int] = []
    slots = RequestSlots(2, started.append)
    for position in range(5):
        slots.admit(position)
    slots.admit(9, first=True)
    assert started == [0, 1]
    slots.release()
    slots.release()
    assert started == [0, 1, 9, 2]


async def test_a_try_waiting_again_goes_ahead_of_positions_not_started() -> None:
    started: list[int] = []
    slots = RequestSlots(1, started.append)
    slots.admit(0)
    slots.admit(1)
    retry = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # position 0's try ends: the retry waiting is older than position 1
    await retry
    assert started == [0]
    slots.release()
    assert started == [0, 1]


async def test_a_cancelled_wait_neither_keeps_nor_loses_a_slot() -> None:
    started: list[int] = []
    slots = RequestSlots(1, started.append)
    slots.admit(0)
    waiting = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    waiting.cancel()  # cancelled while still queued: it must not sit ahead of a freed slot
    await asyncio.gather(waiting, return_exceptions=True)
    slots.release()
    slots.admit(1)
    assert started == [0, 1]

    handed = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # the slot goes to the waiter, which is cancelled before it runs: passed on
    handed.cancel()
    await asyncio.gather(handed, return_exceptions=True)
    slots.admit(2)
    assert started == [0, 1, 2]


async def test_the_engine_starts_no_more_rollout_tasks_than_requests_it_may_send(tmp_path: Path) -> None:
    """Eight rollouts admitted, two requests at a time: two tasks exist, not eight parked on a
    semaphore; a task pytest claims beyond the look-ahead goes next; every admitted row is written."""
    from pytest_rollouts.dispatch import engine as engine_module

    bodies = [orjson.dumps({"answer": i, "expected_answer": i, "_ng_task_index": i}) + b"\n" for i in range(16)]
    (tmp_path / "m.jsonl").write_bytes(b"".join(bodies))
    offsets = [sum(map(len, bodies[:i])) for i in range(16)]
    with ScriptedAgent(latency=0.3) as agent:
        header = plan_header(
            urls={"a": agent.url},
            bodies=str(tmp_path / "m.jsonl"),
            out=str(tmp_path / "r.jsonl"),
            failures=str(tmp_path / "f.jsonl"),
            parallel=2,
            limit=8,
        )
        values = {"slot": range(16), "task": range(16), "offset": offsets, "length": [len(b) - 1 for b in bodies]}
        columns = {name: array("q", values.get(name, [0] * 16)) for name in COLUMNS}
        engine = engine_module.Engine(header, columns, lambda data: None)
        running = asyncio.create_task(engine.run())
        while agent.in_flight < 2:
            await asyncio.sleep(0.01)
        rollouts = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "Engine._run"]  # type: ignore[union-attr]
        assert len(rollouts) == 2
        engine.handle(read_frame(io.BytesIO(encode(Claim(15)))))
        while len(read_rows(tmp_path / "r.jsonl")) < 9:  # the look-ahead's eight and the claimed one
            await asyncio.sleep(0.05)
        engine.input_closed()
        await running
    assert [request["_ng_task_index"] for request in agent.requests][2] == 15
    assert sorted(row["_ng_task_index"] for row in read_rows(tmp_path / "r.jsonl")) == [*range(8), 15]


async def test_an_agent_without_room_under_its_adaptive_limit_holds_no_slot(tmp_path: Path) -> None:
    """Eight slots, each agent's adaptive limit starting at four, the slow agent's rollouts first in
    the plan: its four waiting for room give their slots back, and the fast agent's rollouts all
    finish while the slow agent's first replies are still on their way."""
    from pytest_rollouts.dispatch import engine as engine_module

    bodies = [orjson.dumps({"answer": i, "expected_answer": i, "_ng_task_index": i}) + b"\n" for i in range(16)]
    (tmp_path / "m.jsonl").write_bytes(b"".join(bodies))
    offsets = [sum(map(len, bodies[:i])) for i in range(16)]
    with ScriptedAgent(latency=2.0) as slow, ScriptedAgent() as fast:
        header = plan_header(
            urls={"fast": fast.url, "slow": slow.url},
            agents=["fast", "slow"],
            bodies=str(tmp_path / "m.jsonl"),
            out=str(tmp_path / "r.jsonl"),
            failures=str(tmp_path / "f.jsonl"),
            parallel=8,
            limit=16,
            adaptive=True,
        )
        values = {
            "slot": range(16),
            "task": range(16),
            "agent": [1] * 8 + [0] * 8,  # the ``agents`` list's order: 1 is "slow"
            "offset": offsets,
            "length": [len(b) - 1 for b in bodies],
        }
        columns = {name: array("q", values.get(name, [0] * 16)) for name in COLUMNS}
        engine = engine_module.Engine(header, columns, lambda data: None)
        running = asyncio.create_task(engine.run())
        while fast.completed < 8:
            await asyncio.sleep(0.01)
        slow_replied = slow.completed
        engine.input_closed()
        await running
    assert slow_replied == 0


async def test_a_wait_cancelled_and_passed_over_by_a_release_ends_cancelled() -> None:
    """Close cancels every task at once: a try in flight releases its slot before a cancelled
    waiter's task resumes, and release passes over (pops) that waiter."""
    started: list[int] = []
    slots = RequestSlots(1, started.append)
    await slots.acquire()
    waiting = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    waiting.cancel()
    slots.release()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    slots.admit(0)
    assert started == [0]
