"""``dispatch_plan``: a whole plan dispatched in the caller's loop, its rows written as the
dispatcher process writes them, against real agents on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts.config.settings import Settings
from pytest_rollouts.dispatch.inprocess import HealthCheckFailed, dispatch_plan
from pytest_rollouts.dispatch.messages import PlanHeader
from pytest_rollouts.rows.planned import PlannedRollout
from pytest_rollouts.rows.records import RolloutOutcome

from ..agents import Reply, ScriptedAgent
from ..helpers import one_rollout_dispatcher, one_rollout_plan, read_rows

REPLIES = {
    0: Reply(json={"reward": 1.0, "answer": "4", "usage": {"total_tokens": 8}}),
    1: Reply(status=500, json={"detail": "boom"}),
    2: Reply(json={"_ng_failure_class": "judge_invalid", "failure_reason": "unparseable", "reward": 0.0}),
    3: Reply(json={"_ng_failure_class": "timeout_exceeded", "_ng_no_persist": True}),
    4: Reply(json={"reward": 1.0, "_ng_task_index": 9}),  # an echoed stamp: ours is written over it
    5: Reply(raw=b"not json"),
}


def answer(row: dict[str, Any], seen: int) -> Reply:
    return REPLIES.get(row["_ng_task_index"], Reply(json={"reward": 0.5}))


def bodies(n: int) -> list[bytes]:
    return [
        orjson.dumps({"_ng_task_index": i, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}, "q": i})
        for i in range(n)
    ]


def header_for(where: Path, url: str, parallel: int = 2, limit: int = 4, **settings: Any) -> PlanHeader:
    given = {"no_health_check": True, "retry_backoff": 0.01, **settings}
    paths = (str(where / "m.jsonl"), str(where / "r.jsonl"), str(where / "f.jsonl"))
    return PlanHeader.of(Settings.model_validate(given), {"a": url}, parallel=parallel, limit=limit, paths=paths)


class Ended(dict[tuple[int, int], RolloutOutcome]):
    """``dispatch_plan``'s ``on_outcome`` for a test: every ended rollout's outcome by key."""

    def __call__(self, rollout: PlannedRollout, outcome: RolloutOutcome) -> None:
        self[(rollout.task_index, rollout.rollout_index)] = outcome


def normalized(path: Path) -> list[bytes]:
    """The file's lines in key order, each attempt's wall time blanked (the one field that differs)."""
    lines = [
        re.sub(rb'"elapsed_seconds":[-0-9.e+]+', b'"elapsed_seconds":0', line)
        for line in path.read_bytes().splitlines()
    ]
    return sorted(lines, key=lambda line: orjson.loads(line)["_ng_task_index"])


def test_rows_are_the_bytes_the_dispatcher_process_writes(tmp_path: Path) -> None:
    rows = bodies(8)
    engine, local = tmp_path / "engine", tmp_path / "local"
    engine.mkdir()
    local.mkdir()
    with ScriptedAgent(answer) as agent:
        dispatcher = one_rollout_dispatcher(engine, rows, agent.url, parallel=2)
        dispatcher.start()
        try:
            by_engine = {slot: dispatcher.wait(slot) for slot in range(len(rows))}
        finally:
            dispatcher.close()
        _, plan = one_rollout_plan(local, rows)
        ended = Ended()
        result = asyncio.run(dispatch_plan(header_for(local, agent.url), plan, ended))
    for name in ("r.jsonl", "f.jsonl"):
        assert normalized(local / name) == normalized(engine / name), name
    # A result per success, a failure row per failure but the one the agent marked written nowhere.
    assert len(read_rows(local / "r.jsonl")) == 4 and len(read_rows(local / "f.jsonl")) == 3
    assert {row["_ng_task_index"] for row in read_rows(local / "r.jsonl")} == {0, 4, 6, 7}, "task 4 under its own index"
    assert result.stopped == "" and result.drained == []
    assert sorted(ended) == [(i, 0) for i in range(len(rows))]
    for slot, [outcome] in by_engine.items():
        mine = ended[(slot, 0)]
        assert (mine.reward, mine.failure_class, mine.detail, mine.attempts) == (
            outcome.reward,
            outcome.failure_class,
            outcome.detail,
            outcome.attempts,
        ), slot


@pytest.mark.asyncio
async def test_drained_rollouts_are_reported_and_written_nowhere(tmp_path: Path, agent: ScriptedAgent) -> None:
    _, plan = one_rollout_plan(tmp_path, bodies(3))
    ended = Ended()
    result = await dispatch_plan(header_for(tmp_path, agent.url, dispatch_budget=5, drain_margin=10), plan, ended)
    assert result.drained == [(0, 0), (1, 0), (2, 0)]
    assert {outcome.failure_class for outcome in ended.values()} == {"cancelled"}
    assert (tmp_path / "r.jsonl").read_bytes() == (tmp_path / "f.jsonl").read_bytes() == b""
    assert agent.requests == []


@pytest.mark.asyncio
async def test_an_unhealthy_agent_refuses_the_plan_before_anything_is_sent_or_written(tmp_path: Path) -> None:
    _, plan = one_rollout_plan(tmp_path, bodies(2))
    with ScriptedAgent(health=Reply(status=500, json={"status": "down"})) as agent:
        with pytest.raises(HealthCheckFailed) as failed:
            await dispatch_plan(header_for(tmp_path, agent.url, no_health_check=False), plan, Ended())
    assert failed.value.lines == [f'agent \'a\' at {agent.url}: HTTP 500: {{"status":"down"}}']
    assert agent.requests == [] and agent.health_checks == 1
    assert not (tmp_path / "r.jsonl").exists() and not (tmp_path / "f.jsonl").exists()


@pytest.mark.asyncio
async def test_a_cancel_ends_everything_and_leaves_whole_fsynced_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    _, plan = one_rollout_plan(tmp_path, bodies(6))
    slow = {task: Reply(delay=30, json={}) for task in range(3, 6)}
    with ScriptedAgent(lambda row, seen: slow.get(row["_ng_task_index"]) or answer(row, seen)) as agent:
        header = header_for(tmp_path, agent.url)
        running = asyncio.create_task(dispatch_plan(header, plan, Ended()))
        for _ in range(1000):
            if agent.in_flight == 2 and len(agent.requests) == 5:  # 0-2 answered, 3 and 4 in flight
                break
            await asyncio.sleep(0.01)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert asyncio.all_tasks() == {asyncio.current_task()}
        for _ in range(1000):
            if agent.in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert agent.in_flight == 0, "a connection left open"
    assert [row["_ng_task_index"] for row in read_rows(tmp_path / "r.jsonl")] == [0]
    assert [row["_ng_task_index"] for row in read_rows(tmp_path / "f.jsonl")] == [1, 2]
    assert str(tmp_path / "r.jsonl") in synced and str(tmp_path / "f.jsonl") in synced


def test_materialized_inputs_changed_mid_run_stop_dispatch_with_the_reason(tmp_path: Path) -> None:
    path, plan = one_rollout_plan(tmp_path, bodies(5))

    def changes_the_inputs(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 0:
            with open(path, "ab") as inputs:
                inputs.write(b"{}\n")
        return Reply(json={"reward": 1.0})

    ended = Ended()
    with ScriptedAgent(changes_the_inputs) as agent:
        result = asyncio.run(dispatch_plan(header_for(tmp_path, agent.url, parallel=1, limit=1), plan, ended))
    assert result.stopped == f"{path} was changed while the run was reading it"
    assert list(ended) == [(0, 0)] and agent.keys() == [(0, 0)]
    assert len(read_rows(tmp_path / "r.jsonl")) == 1


def test_an_output_removed_mid_run_stops_dispatch_at_the_next_fsync(tmp_path: Path) -> None:
    _, plan = one_rollout_plan(tmp_path, bodies(20))

    def removes_the_output(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 1:
            (tmp_path / "r.jsonl").unlink()
        return Reply(delay=0.2, json={"reward": 1.0})

    ended = Ended()
    with ScriptedAgent(removes_the_output) as agent:
        result = asyncio.run(dispatch_plan(header_for(tmp_path, agent.url, parallel=1, limit=1), plan, ended))
    assert result.stopped == f"{tmp_path / 'r.jsonl'} was removed or replaced while the run was writing it"
    assert len(ended) < 20
