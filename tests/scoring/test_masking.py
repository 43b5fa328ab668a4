"""The masking view (NeMo Gym's ``_masking_step_metrics``): what a run loses to masked results and to
rollouts that never reach the output, on the live line and in the metrics file; nothing when healthy."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import orjson
import pytest

from pytest_rollouts.pytest.progress import progress_line
from pytest_rollouts.pytest.tally import Tally
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.scoring.accounting import Coverage

from ..agents import Reply, ScriptedAgent
from ..helpers import run_rollouts, write_rows

# Task by task: two right, one wrong, one masked, one that breaks (written to the sidecar: failed),
# one the agent marks written nowhere (omitted), and a last one, slow, so the live line has every
# other task's numbers while it waits.
REPLIES = {
    0: Reply(json={"reward": 1.0}),
    1: Reply(json={"reward": 1.0}),
    2: Reply(json={"reward": 0.0}),
    3: Reply(json={"reward": 0.0, "mask_sample": True}),
    4: Reply(status=500, raw=b"boom"),
    5: Reply(json={"_ng_failure_class": "timeout_exceeded", "_ng_no_persist": True}),
    6: Reply(json={"reward": 1.0}, delay=1.0),
}


def progress_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stdout.lines if line.startswith("rollouts: ") and "tasks done" in line]


def metrics(pytester: pytest.Pytester) -> dict[str, Any]:
    (group,) = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
    return group


def test_the_live_line_and_the_metrics_file_show_what_masking_and_dropped_rollouts_cost(
    pytester: pytest.Pytester,
) -> None:
    write_rows(pytester.path / "data.jsonl", [{"responses_create_params": {"input": f"q{i}"}} for i in range(7)])
    with ScriptedAgent(lambda row, seen: REPLIES[row["_ng_task_index"]]) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    lines = progress_lines(result)
    # While the slow task runs: 2 of the 3 unmasked results right, 1 masked of 4 written, and the
    # two that never reached the output, one in the sidecar and one written nowhere.
    waiting = [line for line in lines if line.startswith("rollouts: 6/7 tasks done")]
    assert waiting, lines
    assert all(
        "reward_unmasked 66.67%, 1 masked (25.00%), dropped 2 (1 failed, 1 omitted)" in line for line in waiting
    ), waiting
    # Every line says the same thing of fewer tasks: never a masked count without its share.
    for line in lines:
        masked = re.search(r"(\d+) masked \(([\d.]+)%\)", line)
        assert masked is None or float(masked[2]) > 0, line
    # The whole run, NeMo Gym's keys: 3 of 4 unmasked results right, 1 of 5 written masked.
    assert metrics(pytester)["masking"] == {
        "progress/default/masked_pct": 20.0,
        "progress/default/reward_unmasked": 75.0,
        "progress/default/failed": 1,
        "progress/default/omitted": 1,
    }


def test_a_healthy_run_shows_no_masking_view(pytester: pytest.Pytester) -> None:
    """Wrong answers are the policy's, not the environment's: nothing masked or dropped, nothing shown."""
    write_rows(pytester.path / "data.jsonl", [{"responses_create_params": {"input": f"q{i}"}} for i in range(7)])

    def healthy(row: dict[str, Any], seen: int) -> Reply:
        task = row["_ng_task_index"]
        return Reply(json={"reward": float(task % 2)}, delay=1.0 if task == 6 else 0.0)

    with ScriptedAgent(healthy) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == 0, result.stdout.str()
    lines = progress_lines(result)
    assert any(line.startswith("rollouts: 6/7 tasks done") for line in lines), lines
    assert not [line for line in lines if re.search("reward_unmasked|masked|dropped", line)], lines
    assert "masking" not in metrics(pytester)


def test_an_xdist_controller_tells_failed_from_omitted_by_the_reports() -> None:
    """A controller has only the items' reports: ``rollouts_omitted`` says which failures were written nowhere."""
    failed = Counter({"agent_run_error": 1, "cancelled": 1})
    tally = Tally(
        counts=Coverage(completed=5, masked=1, failed_by_class=failed), reward_sum=3.0, omitted=1, durations=[0.1] * 6
    )
    line = progress_line(tally, 10, None)
    assert "reward_unmasked 75.00%, 1 masked (20.00%), dropped 2 (1 failed, 1 omitted)" in line
    # The dispatcher, ahead of the reports, has seen more: the larger count of each wins.
    ahead = progress_line(tally, 10, None, (7, 7, {}, None, MaskingCounts(5, 3.0, 1, 1, 2)))
    assert "reward_unmasked 60.00%, 1 masked (16.67%), dropped 3 (1 failed, 2 omitted)" in ahead
    assert "masked" not in progress_line(
        Tally(counts=Coverage(completed=2), reward_sum=1.0, durations=[0.1, 0.1]), 10, None
    )


def test_masking_step_metrics_are_nemo_gyms() -> None:
    assert MaskingCounts(count=3, reward=2.0).step_metrics("a") == {}
    assert MaskingCounts(count=0, masked=2).step_metrics("a") == {"progress/a/masked_pct": 100.0}
    assert MaskingCounts(count=3, reward=1.0, omitted=4).step_metrics("a") == {
        "progress/a/reward_unmasked": 33.33,
        "progress/a/omitted": 4,
    }
