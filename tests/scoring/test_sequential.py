"""The anytime-valid comparison: its error rate under no difference, checked by seeded simulation
while looking after every task, and its early stop in ``compare``, a run's summary and the report."""

from __future__ import annotations

import json
import math
import random

import pytest

from pytest_rollouts import preprocess_examples, run_examples
from pytest_rollouts.cli import main
from pytest_rollouts.scoring.sequential import ConfidenceSequence, InTaskOrder, sequential

from ..agents import Reply, ScriptedAgent
from ..helpers import run_rollouts, write_rows

TASKS = 200
EVALS = 1000


def _paired_binary(rng: random.Random, fixed: float, broke: float, n: int = TASKS) -> list[float]:
    """Per-task differences of two one-rollout binary runs: +1 a fixed task, -1 a broken one, else 0."""
    out = []
    for _ in range(n):
        u = rng.random()
        out.append(1.0 if u < fixed else -1.0 if u < fixed + broke else 0.0)
    return out


def _peeking_t_rejects(diffs: list[float], start: int = 10) -> bool:
    """The naive rule the sequence replaces: a 95% normal interval looked at after every task."""
    total = squares = 0.0
    for t, d in enumerate(diffs, 1):
        total, squares = total + d, squares + d * d
        if t >= start:
            variance = (squares - total * total / t) / (t - 1)
            if variance > 0 and abs(total / t) > 1.96 * math.sqrt(variance / t):
                return True
    return False


@pytest.mark.parametrize("discordant", [0.1, 0.3])
def test_looking_after_every_task_the_sequence_keeps_its_5_percent_error(discordant: float) -> None:
    """1,000 seeded evals of 200 tasks with no true difference: the share whose sequence ever
    excludes 0 is at most 5% (its promise; the simulation's se is 0.7 points), where the peeking
    normal interval raises a false alarm in far more of the same evals."""
    rng = random.Random(35)
    evals = [_paired_binary(rng, discordant / 2, discordant / 2) for _ in range(EVALS)]
    errors = sum(sequential(diffs, 1.0).clear_at is not None for diffs in evals) / EVALS
    peeking = sum(_peeking_t_rejects(diffs) for diffs in evals) / EVALS
    assert errors <= 0.05, errors
    assert peeking > 0.10, peeking


def test_the_sequence_holds_a_nonzero_mean_at_every_task_at_once() -> None:
    rng = random.Random(36)
    misses = 0
    for _ in range(EVALS):
        sequence = ConfidenceSequence(1.0)
        for _ in range(TASKS):
            sequence.add(0.1 + rng.uniform(-0.6, 0.6))
            if not sequence.low <= 0.1 <= sequence.high:
                misses += 1
                break
    assert misses / EVALS <= 0.05


def test_a_clear_difference_stops_well_before_the_end() -> None:
    rng = random.Random(37)
    stops = [sequential(_paired_binary(rng, 0.25, 0.05), 1.0).clear_at or TASKS + 1 for _ in range(200)]
    assert sum(s <= TASKS for s in stops) >= 190, "a difference of 0.2 is clear within 200 tasks"
    assert sorted(stops)[len(stops) // 2] < TASKS / 2, "in half the evals before half the tasks"


BASE = [1.0] * 10 + [0.0] * 50
CAND = [1.0] * 50 + [0.0] * 10


def run(pytester: pytest.Pytester, rewards: list[float], out: str, *args: str):
    write_rows(
        pytester.path / "data.jsonl", [{"n": n, "responses_create_params": {"input": f"q{n}"}} for n in range(60)]
    )
    with ScriptedAgent(lambda row, seen: Reply(json={"reward": rewards[row["n"]]})) as agent:
        return run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", *args, out=out)


def test_compare_summary_and_report_say_when_the_difference_was_clear(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(pytester, BASE, "base/r.jsonl").ret == 0
    result = run(pytester, CAND, "cand/r.jsonl", "--rollouts-baseline=base/r.jsonl", "--rollouts-sequential")
    assert result.ret == 0
    diffs = [c - b for b, c in zip(BASE, CAND, strict=True)]
    expected = sequential(diffs, 1.0, 0.05)
    assert expected.clear_at is not None and expected.clear_at < 60
    said = f"difference clear after {expected.clear_at} of 60 tasks (a sequential run stops there)"
    assert said in result.stdout.str()
    capsys.readouterr()
    code = main(
        ["compare", "base/r.jsonl", "cand/r.jsonl", "--sequential", "--max-regression", "0.05", "--json", "c.json"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert f"default: anytime-valid 95% CS [{expected.low:+.4f}, {expected.high:+.4f}] over 60 tasks; {said}" in out
    assert f"no regression beyond 0.05 clear after {expected.gate_clear_at} tasks" in out
    [group] = json.loads((pytester.path / "c.json").read_text())["groups"]
    assert group["sequential"]["clear_at_tasks"] == expected.clear_at
    assert main(["report", "cand/r.jsonl", "--baseline", "base/r.jsonl", "--sequential", "-o", "r.html"]) == 0
    assert said in (pytester.path / "r.html").read_text()


@pytest.mark.asyncio
async def test_a_running_eval_stops_once_the_difference_is_clear() -> None:
    """The Python API's results fed in task order to the sequence; leaving the block when it excludes
    0 cancels what is in flight, so far fewer rollouts than the dataset's are run."""
    rows = preprocess_examples(
        [{"n": n, "responses_create_params": {"input": "q"}} for n in range(400)], agent_map={"_default": "p"}
    )
    baseline = {n: 0.0 if n % 3 else 1.0 for n in range(400)}  # a third solved
    sequence = ConfidenceSequence(1.0)
    feed = InTaskOrder(sequence)
    with ScriptedAgent(lambda row, seen: Reply(json={"reward": 1.0 if row["n"] % 4 else 0.0})) as agent:
        async with run_examples(rows, {"p": agent.url}, parallel=4) as results:
            async for row, result in results:
                feed.add(row["_ng_task_index"], result["reward"] - baseline[row["n"]])
                if sequence.excludes(0.0):
                    break
    assert sequence.low > 0, "the candidate solves three in four, the baseline one in three"
    assert sequence.tasks < 200
    assert len(agent.requests) < 250, "the rest of the 400 were never sent"
