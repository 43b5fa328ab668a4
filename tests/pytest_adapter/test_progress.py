"""Progress while a run goes: the status line redrawn in place on a terminal (cut to its width,
live while a slow rollout runs, counting what finished behind it), a line per tenth in a log, and
the latency and throughput it shows.

The dispatcher's heartbeat and the line's redraws come every ``--rollouts-progress-interval``;
the sessions here set it to ``BEAT`` and scale their agents' delays to it.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts.pytest.progress import CLEAR_TO_END, progress_line, rate
from pytest_rollouts.pytest.properties import ELAPSED, REWARDS
from pytest_rollouts.pytest.tally import Tally
from pytest_rollouts.rows.masking import MaskingCounts
from pytest_rollouts.scoring.accounting import Coverage
from pytest_rollouts.scoring.perf import latency_summary

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import pytest_command, run_rollouts, tasks, write_rows

# Short enough that a slow rollout of ten beats costs a second, long enough for a loaded machine.
BEAT = 0.1


def test_latency_and_throughput_are_reported(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(10))
    with ScriptedAgent(latency=0.05) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.stdout.fnmatch_lines(
        ["10 rollouts ran in *s, */[sh]", "latency p50 *s, p90 *s, p99 *s, max *s over 10 rollouts"]
    )
    [entry] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    perf = entry["perf_summary"]
    assert perf["count"] == 10 and 0.05 <= perf["p50"] <= perf["p90"] <= perf["p99"] <= perf["max"]
    assert perf["rollouts_per_hour"] > 0


def test_progress_rate_counts_up_to_now() -> None:
    """A line written while one slow rollout holds the run up shows the rate falling."""
    now = time.perf_counter()
    tally = Tally(started_at=now - 100, last_at=now - 90, durations=[1.0] * 10)
    assert tally.per_hour() == pytest.approx(3600.0)
    assert ", 360/h" in progress_line(tally, 20, None)


def test_the_live_line_takes_latency_from_the_dispatcher_and_counts_no_reward_on_a_controller() -> None:
    """The reported items' p50 left out the slow rollouts they wait behind ('p50 0.01s' beside a
    summary's 30 s), and an xdist controller, which has only reports, never counted no_reward."""
    tally = Tally(counts=Coverage(completed=2, unrewarded=2), durations=[0.01, 0.01])
    controller = progress_line(tally, 3, None)
    assert "2 failed (no_reward 2)" in controller and "p50 0.01s" in controller
    dispatcher = progress_line(tally, 3, None, (3, 3, {"no_reward": 2}, [25.0, 25.0], MaskingCounts()))
    assert "p50 25.00s p90 25.00s" in dispatcher and "2 failed (no_reward 2)" in dispatcher


def test_the_latency_sketch_is_within_two_percent_of_the_exact_quantiles() -> None:
    import random

    from pytest_rollouts.dispatch.latency import LatencySketch

    rng = random.Random(7)
    samples = [rng.lognormvariate(0, 1.5) for _ in range(5000)]
    sketch = LatencySketch()
    for sample in samples:
        sketch.add(sample)
    exact = latency_summary(samples)
    p50, p90 = sketch.p50_p90() or []
    assert p50 == pytest.approx(exact["p50"], rel=0.021) and p90 == pytest.approx(exact["p90"], rel=0.021)
    assert LatencySketch().p50_p90() is None


def test_a_cut_line_ends_after_a_whole_part() -> None:
    from pytest_rollouts.pytest.progress import fit

    line = "rollouts: 6/24 tasks done, 1 failed (agent_run_error 1), 2 in flight, 3.3/s"
    assert fit(line, 200) == line
    assert fit(line, 70) == "rollouts: 6/24 tasks done, 1 failed (agent_run_error 1), 2 in flight"
    assert fit(line, 45) == "rollouts: 6/24 tasks done, 1 failed"
    assert fit(line, 12) == "rollouts: 6/"


def test_rate_counts_from_the_first_rollout_not_from_a_worker_start_up() -> None:
    """An xdist controller's loop starts before its workers can dispatch anything."""
    tally = Tally(started_at=time.perf_counter() - 10.0)
    report = pytest.TestReport(
        "data.jsonl::task[0]",
        ("data.jsonl", None, "task[0]"),
        {},
        "passed",
        None,
        "call",
        [],
        user_properties=[(REWARDS, [1.0, 1.0]), (ELAPSED, [0.5, 1.0])],
    )
    tally.add(report)
    assert tally.last_at - tally.started_at == pytest.approx(1.0)
    assert tally.per_hour() == pytest.approx(7200.0)


def test_latency_summary() -> None:
    assert latency_summary([]) == {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
    summary = latency_summary([float(x) for x in range(1, 102)])
    assert (summary["p50"], summary["p90"], summary["p99"], summary["max"]) == (51.0, 91.0, 100.0, 101.0)


def test_progress_lines_in_a_log_every_tenth(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(30))
    with ScriptedAgent(latency=0.15) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-parallel=2")
    lines = [line for line in result.stdout.lines if line.startswith("rollouts: ")]
    assert 5 <= len(lines) <= 10, lines
    assert all(" in flight, " in line for line in lines), "the dispatcher reports what is in flight with its results"
    for i, line in enumerate(lines):
        # A line is due each time pytest has reported another tenth (3) of the items, in order;
        # the dispatcher, ahead of it, may have finished more.
        reported = 3 * (i + 1)
        done = int(line.split("/")[0].removeprefix("rollouts: "))
        assert done >= reported, line
        if "oldest in flight: task " in line:
            oldest = int(line.split("oldest in flight: task ")[1].split()[0])
            assert oldest >= reported, f"tasks 0-{reported - 1} were reported, yet the line names task {oldest}: {line}"
    assert not any(line.startswith("data.jsonl .") for line in result.stdout.lines), "no dots: the lines replace them"
    assert sum(line.startswith("data.jsonl") for line in result.stdout.lines) == 1, "the name is written once"
    start = result.stdout.lines.index(lines[0])
    assert result.stdout.lines[start : start + len(lines)] == lines, "one line after another, no blank ones"
    assert result.stdout.lines[start + len(lines)].strip() == "[100%]", "pytest's [100%] follows"


def _run_on_a_terminal(cwd: Path, *args: str, columns: int = 200) -> str:
    """A rollouts session whose stdout is a pseudo-terminal ``columns`` wide, as on a user's
    screen; all it wrote. Its status line is redrawn, and the dispatcher beats, every ``BEAT`` s."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.Popen(
        pytest_command(*args, f"--rollouts-progress-interval={BEAT}"),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
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


def test_status_line_is_redrawn_in_place_on_a_terminal(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(24))
    with ScriptedAgent(latency=BEAT) as agent:  # twelve beats: at least two redraws
        screen = _run_on_a_terminal(pytester.path, agent.url, "--rollouts-parallel=2")
    redraws = screen.split("\rdata.jsonl rollouts: ")[1:]
    assert len(redraws) >= 2, screen
    assert all(CLEAR_TO_END in r for r in redraws), "each redraw clears what the last one left"
    assert "p50 " in redraws[-1] and "/s" in redraws[-1]
    last = redraws[-1].split("\n")[0]
    assert f"\rdata.jsonl {CLEAR_TO_END}" in last and last.rstrip().endswith("[100%]"), (
        "the last redraw leaves the line to pytest's [100%]"
    )
    assert "...." not in screen, "no line of dots: the status line replaces them"
    assert "24 passed" in screen


def test_status_line_is_cut_to_the_terminals_width(pytester: pytest.Pytester) -> None:
    """A longer line wraps, and each redraw left a stale row behind on an 80-column terminal."""
    write_rows(pytester.path / "data.jsonl", tasks(24))

    def task_5_fails(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=500) if row["_ng_task_index"] == 5 else verifier(row, seen)

    with ScriptedAgent(task_5_fails, latency=BEAT) as agent:  # twelve beats of redraws
        screen = _run_on_a_terminal(pytester.path, agent.url, "--rollouts-parallel=2", columns=60)
    redraws = [r.split(CLEAR_TO_END)[0] for r in screen.split("\r") if r.startswith("data.jsonl rollouts: ")]
    assert redraws, screen
    assert all(len(r) <= 59 for r in redraws), redraws
    assert all(re.search(r"(tasks done|failed|\)|in flight|/[sh]|\ds)$", r) for r in redraws), (
        f"cut after a whole part, not mid-word ('4 in fligh'): {redraws}"
    )
    failing = [r for r in redraws if "tasks done, 1 failed" in r]
    assert failing, f"the failed count comes before what the cut hid it behind: {redraws}"


def test_status_line_stays_live_while_a_slow_rollout_runs(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    with ScriptedAgent(latency=10 * BEAT) as agent:
        screen = _run_on_a_terminal(pytester.path, agent.url)
    redraws = screen.split("\rdata.jsonl rollouts: ")[1:]
    # A beat between the reply and its report may say nothing is in flight any more.
    waiting = [r for r in redraws if r.startswith("0/1 tasks done") and "oldest in flight: task 0 rollout 0, " in r]
    assert len(waiting) >= 2, screen


def test_status_line_counts_what_finished_behind_a_slow_early_rollout(pytester: pytest.Pytester) -> None:
    """pytest reports items in plan order, so a slow task 1 holds back the report of every task
    after it; the line still counts what the dispatcher has finished, failures included."""
    write_rows(pytester.path / "data.jsonl", tasks(12))

    def slow_task_1(row: dict[str, Any], seen: int) -> Reply:
        task = row["_ng_task_index"]
        if task == 1:
            return Reply(json={"reward": 1.0}, delay=10 * BEAT)
        return Reply(status=500) if task == 5 else verifier(row, seen)

    with ScriptedAgent(slow_task_1) as agent:
        screen = _run_on_a_terminal(pytester.path, agent.url, "--rollouts-parallel=3")
    waiting = [r for r in screen.split("\rdata.jsonl rollouts: ") if "oldest in flight: task 1 rollout 0" in r]
    assert waiting, screen
    # The masking view follows the failures: 6 of the 10 results right, the failure dropped from the output.
    expected = (
        "11/12 tasks done, 1 failed (agent_run_error 1), reward_unmasked 60.00%, dropped 1 (1 failed), 1 in flight, "
    )
    assert waiting[-1].startswith(expected), waiting[-1]


@pytest.mark.parametrize(
    ("per_hour", "shown"),
    [
        (17650742.0, "4.9k/s"),
        (3600 * 12.0, "12/s"),
        (3600 * 1.5, "1.5/s"),
        (3600 * 999.7, "1.0k/s"),
        (3600 * 2.5e6, "2.5M/s"),
        (1800.0, "1.8k/h"),
        (360.0, "360/h"),
        (0.0, "0.0/h"),
    ],
)
def test_rates_are_rounded_to_a_glance(per_hour: float, shown: str) -> None:
    """The line printed 17650742/h."""
    assert rate(per_hour) == shown


def test_a_log_never_repeats_a_progress_line(pytester: pytest.Pytester) -> None:
    """The dispatcher finishes every task while pytest waits on a slow first one; pytest's reports
    then catch up at once, and each tenth of them wrote ``20/20 tasks done`` again."""
    write_rows(pytester.path / "data.jsonl", tasks(20))

    def slow_task_0(row: dict[str, Any], seen: int) -> Reply:
        return Reply(json={"reward": 1.0}, delay=10 * BEAT) if row["_ng_task_index"] == 0 else verifier(row, seen)

    with ScriptedAgent(slow_task_0) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-progress-interval={BEAT}"
        )
    result.assert_outcomes(passed=20)
    lines = [line for line in result.stdout.lines if line.startswith("rollouts: ")]
    assert lines, result.stdout.str()
    counts = [line.split(" tasks done")[0] for line in lines]
    assert len(counts) == len(set(counts)), lines


def test_a_rollouts_status_is_asked_of_the_reporter_before_pytests_subtests_plugin(pytester: pytest.Pytester) -> None:
    """The status hook stops at the first answer: the reporter's spares each rollout report the
    subtests plugin's lookup."""
    pytester.makeconftest(
        """
        def pytest_collection_finish(session):
            impls = session.config.hook.pytest_report_teststatus.get_hookimpls()
            print("CALLED IN ORDER", *[impl.plugin_name for impl in reversed(impls)])
        """
    )
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = pytester.runpytest("data.jsonl", "--co", "-s")
    [line] = [line for line in result.outlines if line.startswith("CALLED IN ORDER")]
    order = line.split()[3:]
    assert order.index("rollouts-reporter") < order.index("subtests"), order
