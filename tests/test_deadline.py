"""A dispatch deadline: rollouts that cannot finish in time are not started, and resume runs them."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest

from pytest_rollouts.metrics import latency_summary
from pytest_rollouts.report import CLEAR_TO_END

from .agents import ScriptedAgent
from .conftest import tasks, write_rows
from .helpers import Artifacts, keys, pytest_command, run_rollouts


def test_budget_drains_the_rest_and_resume_runs_it(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(40))
    with ScriptedAgent(latency=0.2) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-parallel=2")
        first = run_rollouts(pytester, *common, "--rollouts-dispatch-budget=1.0", "--rollouts-drain-margin=0.1", "-rs")
        outcomes = first.parseoutcomes()
        assert 0 < outcomes["passed"] < 40 and outcomes["passed"] + outcomes["skipped"] == 40
        first.stdout.fnmatch_lines(["*rollouts not started, dispatch budget: *--rollouts-resume runs them*"])
        artifacts = Artifacts(pytester.path)
        done = keys(artifacts.rows)
        assert len(done) == outcomes["passed"] and artifacts.failures == [], "drained rollouts are written nowhere"
        assert len(agent.requests) == len(done), "drained rollouts were never sent"
        second = run_rollouts(pytester, *common, "--rollouts-resume")
        second.assert_outcomes(passed=40)
        assert sorted(keys(Artifacts(pytester.path).rows)) == [(t, 0) for t in range(40)]


def test_latency_and_throughput_are_reported(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(10))
    with ScriptedAgent(latency=0.05) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.stdout.fnmatch_lines(
        ["*rollouts/s, * rollouts/hour*", "latency p50 0.0*s, p90 *s, p99 *s, max *s over 10 rollouts"]
    )
    [entry] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    perf = entry["perf_summary"]
    assert perf["count"] == 10 and 0.05 <= perf["p50"] <= perf["p90"] <= perf["p99"] <= perf["max"]
    assert perf["rollouts_per_hour"] > 0


def test_latency_summary() -> None:
    assert latency_summary([]) == {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
    summary = latency_summary([float(x) for x in range(1, 102)])
    assert (summary["p50"], summary["p90"], summary["p99"], summary["max"]) == (51.0, 91.0, 100.0, 101.0)


def test_drain_margin_defaults_to_p75_once_five_finished() -> None:
    from pytest_rollouts.engine import Deadline

    deadline = Deadline(budget=1000.0, margin=None)
    deadline.durations.extend([1.0, 2.0, 3.0, 4.0])
    assert deadline.margin() == 0.0, "too few durations to trust"
    deadline.durations.append(5.0)
    assert deadline.margin() == 4.0
    assert deadline.refuse() == ""
    assert Deadline(budget=1000.0, margin=7.0).margin() == 7.0
    assert Deadline(budget=0.5, margin=1.0).refuse().startswith("dispatch budget: ")


def test_progress_lines_in_a_log_every_tenth(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(30))
    with ScriptedAgent(latency=0.25) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-parallel=2")
    lines = [line for line in result.stdout.lines if line.startswith("rollouts: ")]
    assert 5 <= len(lines) <= 10, lines
    assert lines[0].startswith("rollouts: 3/30 tasks done, ")
    assert any(" in flight, " in line and "oldest in flight: task " in line for line in lines), (
        "once the dispatcher has reported (every 2 s), lines say what is in flight"
    )
    assert not any(line.startswith("data.jsonl .") for line in result.stdout.lines), "no dots: the lines replace them"
    assert sum(line.startswith("data.jsonl") for line in result.stdout.lines) == 1, "the name is written once"
    start = result.stdout.lines.index(lines[0])
    assert result.stdout.lines[start : start + len(lines)] == lines, "one line after another, no blank ones"
    assert result.stdout.lines[start + len(lines)].strip() == "[100%]", "pytest's [100%] follows"


def _run_on_a_terminal(cwd: Path, *args: str) -> str:
    """A rollouts session whose stdout is a pseudo-terminal, as on a user's screen; all it wrote."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        pytest_command(*args), cwd=cwd, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=_wide_env()
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the session ended and closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode()


def _wide_env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200"}


def test_status_line_is_redrawn_in_place_on_a_terminal(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(24))
    with ScriptedAgent(latency=0.5) as agent:  # about 6 s: at least two redraws, 2 s apart
        screen = _run_on_a_terminal(pytester.path, agent.url, "--rollouts-parallel=2")
    redraws = screen.split("\rdata.jsonl rollouts: ")[1:]
    assert len(redraws) >= 2, screen
    assert all(CLEAR_TO_END in r for r in redraws), "each redraw clears what the last one left"
    assert "p50 " in redraws[-1] and "/h" in redraws[-1]
    last = redraws[-1].split("\n")[0]
    assert f"\rdata.jsonl {CLEAR_TO_END}" in last and last.rstrip().endswith("[100%]"), (
        "the last redraw leaves the line to pytest's [100%]"
    )
    assert "...." not in screen, "no line of dots: the status line replaces them"
    assert "24 passed" in screen


def test_status_line_stays_live_while_a_slow_rollout_runs(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    with ScriptedAgent(latency=5.0) as agent:
        screen = _run_on_a_terminal(pytester.path, agent.url)
    waiting = [r for r in screen.split("\rdata.jsonl rollouts: ")[1:] if r.startswith("0/1 tasks done")]
    assert waiting, screen
    assert "oldest in flight: task 0 rollout 0, " in waiting[-1]
