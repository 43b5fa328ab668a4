"""``run_from_config`` keeps the live status file ``<out>.status.json`` as a pytest session does."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts import CollectionConfig, run_from_config
from pytest_rollouts.lifecycle.status import Counts, StatusWriter
from pytest_rollouts.store.status import FINISHED, RunStatus, read_status, status_path

from ..agents import ScriptedAgent, ThrottlingAgent
from ..helpers import embedded, new_status, read_rows, tasks, write_rows

ROWS = 16


@pytest.fixture(autouse=True)
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(ROWS))
    yield tmp_path


def config(agent: ScriptedAgent, **changes: Any) -> CollectionConfig:
    given = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}, "parallel": 4}
    return CollectionConfig(**{**given, "status_interval": 0.05, **changes})


async def watched(run: asyncio.Task[Any], path: Path, stop_at: int | None = None) -> list[RunStatus]:
    """Each distinct status read while ``run`` goes; with ``stop_at``, ``run`` is cancelled once that many are done."""
    seen: list[RunStatus] = []
    while not run.done():
        status = new_status(path, seen)
        if status is not None and stop_at is not None and status.done >= stop_at:
            run.cancel()
        await asyncio.sleep(0.02)
    return seen


def test_the_status_file_says_what_runs_and_how_the_run_ended(here: Path) -> None:
    path = status_path(here / "out" / "r.jsonl")

    async def main() -> list[RunStatus]:
        with ScriptedAgent(latency=0.2) as agent:
            run = asyncio.create_task(run_from_config(config(agent)))
            seen = await watched(run, path)
            assert (await run).exit_status == 0
        return seen

    seen = asyncio.run(main())
    running = [s for s in seen if s.state == "running"]
    assert any(s.in_flight > 0 and s.oldest_in_flight is not None for s in running), seen
    done = [s.done for s in running]
    assert done == sorted(done) and len(set(done)) >= 2, done
    assert all(s.total == ROWS and s.limit == 4 and s.limits == {} and s.pid == os.getpid() for s in running)
    final = read_status(path)
    lines = len(read_rows(here / "out" / "r.jsonl")) + len(read_rows(here / "out" / "r_failures.jsonl"))
    assert final.state == "finished" and final.done == lines == ROWS and final.in_flight == 0
    assert final.failed == {} and final.eta_s is None


def test_a_cancelled_run_says_it_stopped(here: Path) -> None:
    path = status_path(here / "out" / "r.jsonl")

    async def main() -> None:
        with ScriptedAgent(latency=0.2) as agent:
            run = asyncio.create_task(run_from_config(config(agent)))
            await watched(run, path, stop_at=2)
            with pytest.raises(asyncio.CancelledError):
                await run

    asyncio.run(main())
    final = read_status(path)
    assert final.state == "stopped" and 2 <= final.done < ROWS
    assert final.in_flight == 0 and not final.writer_gone()


def test_under_auto_the_status_and_the_metrics_file_say_how_dispatch_adapted(here: Path) -> None:
    """A throttling agent keeps the adaptive limit far under MAX: the status file says that limit
    while the run goes, and the metrics file (and the report's chart) the limit over time and the retries."""
    write_rows(here / "data.jsonl", tasks(200))
    path = status_path(here / "out" / "r.jsonl")

    async def main() -> list[RunStatus]:
        with ThrottlingAgent(capacity=6) as agent:
            given = config(agent, parallel="auto:64", retries=10, retry_backoff=0.01, html="r.html")
            run = asyncio.create_task(run_from_config(given))
            seen = await watched(run, path)
            assert (await run).exit_status == 0
        return seen

    # Before dispatch begins the file can only say the ceiling; from then on, the live limit.
    live = [s for s in asyncio.run(main()) if s.state == "running" and s.limits]
    assert live and all(set(s.limits) == {"policy"} and s.limit == s.limits["policy"] < 64 for s in live), live
    (entry,) = orjson.loads((here / "out" / "r_aggregate_metrics.json").read_bytes())
    dispatch = entry["dispatch"]
    (series,) = dispatch["concurrency_limit"]
    assert series["ceiling"] == 64 and all(1 <= limit < 64 for _, limit in series["points"]), series
    assert dispatch["retries"] > 0 and dispatch["retries_refused_by_budget"] >= 0, dispatch
    chart = embedded((here / "r.html").read_bytes(), "report-data")["charts"]["concurrency"]
    assert chart["series"] == [{"name": "policy", "ceiling": 64, "points": series["points"]}]


def test_the_last_write_is_the_stops_even_with_the_thread_mid_write(tmp_path: Path) -> None:
    """``stop`` does not wait for the writing thread to end (a join at every session's end), but
    the thread writes nothing after it: one caught in a write finishes it first, then stop writes."""
    in_write, go_on = threading.Event(), threading.Event()

    def slow_source() -> Counts:
        if threading.current_thread() is not threading.main_thread():  # the first write is start's
            in_write.set()
            assert go_on.wait(10)
        return Counts(4, 1)

    writer = StatusWriter(tmp_path / "r.jsonl", 0.001, lambda: 1, slow_source, total=4).start()
    assert in_write.wait(10)  # the thread is in a write
    stopping = threading.Thread(target=writer.stop, args=(FINISHED, Counts(4, 4)))
    stopping.start()
    go_on.set()
    stopping.join(10)
    writer._thread.join(10)  # the thread, woken, ends without another write
    status = read_status(status_path(tmp_path / "r.jsonl"))
    assert (status.state, status.done) == (FINISHED, 4)
