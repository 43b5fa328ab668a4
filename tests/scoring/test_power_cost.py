"""``power`` prices its advice: the rollouts, tokens and time of each eval size it proposes, from the
run's own usage and timing in its metrics file."""

from __future__ import annotations

import json
import re

import pytest

from pytest_rollouts.cli import main

from ..agents import Reply, ScriptedAgent
from ..helpers import run_rollouts, write_rows

REWARDS = [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 0.5, 0.0, 0.25, 1.0, 0.5, 0.75]
USAGE = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}


def test_power_says_what_each_proposed_size_costs_from_the_runs_measurements(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    write_rows(pytester.path / "data.jsonl", [{"n": n, "responses_create_params": {"input": "q"}} for n in range(12)])

    def behaviour(row: dict, seen: int) -> Reply:
        reward = REWARDS[row["n"]] if seen % 2 else min(1.0, REWARDS[row["n"]] + 0.25)
        return Reply(json={"reward": reward, "response": {"id": "r", "output": [], "usage": USAGE}})

    with ScriptedAgent(behaviour, latency=0.01) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2")
    assert result.ret == 0
    [entry] = json.loads((pytester.path / "out/r_aggregate_metrics.json").read_text())
    per_hour = entry["perf_summary"]["rollouts_per_hour"]
    capsys.readouterr()
    assert main(["power", "out/r.jsonl", "--delta", "0.1"]) == 0
    out = capsys.readouterr().out
    sized = re.findall(r"to detect 0\.1: (\d+) tasks x (\d+) \(([\d,]+) rollouts, ([\d.k]+) tokens, (\S+) at", out)
    assert [int(k) for _, k, _, _, _ in sized] == [1, 2, 4, 8, 16]
    for tasks, k, rollouts, tokens, took in sized:
        n = int(tasks) * int(k)
        assert int(rollouts.replace(",", "")) == n
        expected_tokens = 120 * n
        assert tokens == (f"{expected_tokens / 1000:.1f}k" if expected_tokens >= 1000 else str(expected_tokens))
        seconds = 3600 * n / per_hour
        assert took == (f"{seconds:.0f}s" if seconds < 60 else took), "a minute or more: said in minutes"
    # More repeats need fewer tasks (only the within-task term shrinks) but more rollouts in all here.
    tasks_by_k = [int(t) for t, *_ in sized]
    assert tasks_by_k == sorted(tasks_by_k, reverse=True)
    assert f"a rollout of this run: 120 tokens, median {entry['perf_summary']['p50']:.2f}s" in out
    assert f"{per_hour:,.0f} rollouts/h dispatched" in out
