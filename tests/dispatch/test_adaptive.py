"""``--rollouts-parallel auto:MAX``: each agent's limit adapts, as a real loopback agent sees it.

Measured from the server's side (the most requests it held at once), never by timing: a
throttling agent (429 with ``Retry-After`` past a few requests at once) and one whose latency
rises with the requests it holds keep the limit far under MAX, and a fast one lets it grow past
where it starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts import CollectionConfig, run
from pytest_rollouts.dispatch.concurrency import START
from pytest_rollouts.dispatch.messages import DispatchRecord

from ..agents import Reply, ScriptedAgent, ThrottlingAgent
from ..helpers import embedded, one_rollout_dispatcher, read_rows, run_rollouts, subprocess_run, tasks, write_rows

CAPACITY = 6


def bodies(n: int) -> list[bytes]:
    return [orjson.dumps({"_ng_task_index": i, "_ng_rollout_index": 0, "q": i}) for i in range(n)]


def dispatch(tmp_path: Path, agent: ScriptedAgent, rows: int, parallel: str, **settings: Any) -> DispatchRecord:
    """Every row dispatched to ``agent`` through the dispatcher process; its record once closed."""
    dispatcher = one_rollout_dispatcher(tmp_path, bodies(rows), agent.url, parallel, **settings)
    dispatcher.start()
    try:
        for slot in range(rows):
            dispatcher.wait(slot)
    finally:
        dispatcher.close()
    written = read_rows(tmp_path / "r.jsonl") + read_rows(tmp_path / "f.jsonl")
    assert sorted(row["_ng_task_index"] for row in written) == list(range(rows))
    return dispatcher.record


def limits(record: DispatchRecord) -> list[int]:
    (series,) = record.limits
    return [int(limit) for _, limit in series.points]


def test_a_throttling_agent_brings_the_limit_down(tmp_path: Path) -> None:
    with ThrottlingAgent(CAPACITY) as agent:
        record = dispatch(tmp_path, agent, 300, "auto:64", retries=10, retry_backoff=0.01)
    seen = limits(record)
    # It grew until the agent pushed back, then fell: a later point below an earlier one.
    assert any(later < max(seen[: i + 1]) for i, later in enumerate(seen)), seen
    assert max(seen) < 32 and agent.peak_in_flight < 32, (seen, agent.peak_in_flight)


def test_a_fixed_parallel_against_the_same_agent_holds_it_at_parallel(tmp_path: Path) -> None:
    """The same agent with ``parallel`` fixed: what the adaptive limit spares it."""
    with ThrottlingAgent(CAPACITY) as agent:
        dispatcher = one_rollout_dispatcher(tmp_path, bodies(200), agent.url, 64, retries=0)
        dispatcher.start()
        try:
            for slot in range(200):
                dispatcher.wait(slot)
        finally:
            dispatcher.close()
    assert agent.peak_in_flight >= 32 and dispatcher.record.limits == []


def test_a_fast_agent_lets_the_limit_grow(tmp_path: Path) -> None:
    with ScriptedAgent(latency=0.005) as agent:
        record = dispatch(tmp_path, agent, 400, "auto:32")
    assert agent.peak_in_flight > START and max(limits(record)) > START, (agent.peak_in_flight, limits(record))
    assert max(limits(record)) <= 32 and agent.peak_in_flight <= 32


def test_an_agent_slowing_with_load_keeps_the_limit_low(tmp_path: Path) -> None:
    """Each request takes 5 ms for every request the agent holds: no status says overloaded, the
    latency does."""
    holder: list[ScriptedAgent] = []

    def slowing(row: dict[str, Any], seen: int) -> Reply:
        return Reply(json={"reward": 1.0}, delay=0.005 * holder[0].in_flight)

    with ScriptedAgent(slowing) as agent:
        holder.append(agent)
        record = dispatch(tmp_path, agent, 300, "auto:128")
    assert agent.peak_in_flight < 64 and max(limits(record)) < 64, (agent.peak_in_flight, limits(record))


@pytest.mark.parametrize("value", ["auto:0", "auto:x", "auto:-1", "auto:", "auto:100001"])
def test_a_bad_adaptive_parallel_is_refused_before_anything_is_sent(
    pytester: pytest.Pytester, agent: ScriptedAgent, value: str
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-parallel={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert "--rollouts-parallel" in text and "Traceback" not in text
    assert agent.requests == [] and agent.health_checks == 0


def test_a_bad_adaptive_parallel_in_ini_names_the_key(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    pytester.makeini("[pytest]\nrollouts_parallel = auto:0\n")
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "rollouts_parallel" in result.stdout.str() + result.stderr.str()
    assert agent.requests == []


def test_the_limit_over_time_is_in_the_metrics_file_the_summary_and_the_report(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(200))
    with ScriptedAgent(latency=0.005) as agent:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-parallel=auto:16",
            "--rollouts-html=r.html",
        )
    assert result.ret == 0
    assert "adaptive limit of default:" in result.stdout.str()
    (entry,) = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
    (series,) = entry["dispatch"]["concurrency_limit"]
    assert series["ceiling"] == 16 and series["points"][0] == [0.0, START]
    assert all(1 <= limit <= 16 for _, limit in series["points"])
    chart = embedded((pytester.path / "r.html").read_bytes(), "report-data")["charts"]["concurrency"]
    assert chart["series"] == [{"name": "default", "ceiling": 16, "points": series["points"]}]


def test_under_xdist_each_worker_adapts_its_own_share(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(60))
    with ScriptedAgent(latency=0.005) as agent:
        done = subprocess_run(pytester.path, agent.url, "-n", "2", "--rollouts-parallel=auto:9")
    assert done.returncode == 0, done.stdout + done.stderr
    (entry,) = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
    series = entry["dispatch"]["concurrency_limit"]
    # Nine split over two workers: five and four, each its own limit's ceiling.
    assert sorted((s["worker"], s["ceiling"]) for s in series) == [("gw0", 5), ("gw1", 4)]
    assert agent.peak_in_flight <= 9


def test_the_python_api_takes_auto_and_adapts_under_its_ceiling(
    agent: ScriptedAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(12))
    config = CollectionConfig(input=["data.jsonl"], out="out/r.jsonl", agents={"policy": agent.url}, parallel="auto:2")
    assert config.model_dump()["parallel"] == "auto:2" and repr(config.parallel) == "auto:2"
    result = run(config)
    assert result.exit_status == 0 and len(read_rows(tmp_path / "out" / "r.jsonl")) == 12
    assert 1 <= agent.peak_in_flight <= 2
    for bad in ("auto:0", "auto:x"):
        with pytest.raises(ValueError, match="parallel"):
            run({"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}, "parallel": bad})
    assert len(agent.requests) == 12
