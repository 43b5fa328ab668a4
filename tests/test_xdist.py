"""``-n`` changes nothing but speed: every rollout once, one score, full windows on every worker."""

from __future__ import annotations

import json

import pytest

from .agents import ScriptedAgent
from .conftest import tasks, write_rows
from .helpers import QUIET, Artifacts, keys


def run_n(pytester: pytest.Pytester, agent: ScriptedAgent, workers: int, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        *QUIET,
        "-n",
        str(workers),
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        f"--rollouts-out=n{workers}/r.jsonl",
        *args,
    )


def test_n2_equals_n0(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(30))
    (pytester.path / "n2").mkdir()
    (pytester.path / "n2" / "r.jsonl").write_text('{"stale": true}\n')
    single = pytester.runpytest(
        *QUIET, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=n0/r.jsonl", "--rollouts-repeats=3"
    )
    single.assert_outcomes(passed=30)
    double = run_n(pytester, agent, 2, "--rollouts-repeats=3")
    double.assert_outcomes(passed=30)
    one, two = Artifacts(pytester.path, "n0/r.jsonl"), Artifacts(pytester.path, "n2/r.jsonl")
    assert sorted(keys(two.rows)) == sorted(keys(one.rows)) == sorted(keys(two.materialized))
    assert len(keys(two.rows)) == len(set(keys(two.rows))) == 90
    metrics = [json.loads((pytester.path / d / "r_aggregate_metrics.json").read_text()) for d in ("n0", "n2")]
    assert metrics[0] == metrics[1], "the same metrics to the last digit"
    double.stdout.fnmatch_lines(["default: mean reward 0.6667*over 90 rollouts*"])
    assert double.stdout.str().count("[local metrics]") == 1, "scored once, on the controller"
    assert list((pytester.path / "n2").glob("r.prev-*")), "the stale output was moved aside, once"


def test_parallel_is_the_total_and_windows_stay_full(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(60))
    with ScriptedAgent(latency=0.1) as agent:
        result = run_n(pytester, agent, 2, "--rollouts-parallel=8")
        result.assert_outcomes(passed=60)
        assert agent.peak_in_flight == 8


@pytest.mark.parametrize("dist", ["worksteal", "each", "loadfile"])
def test_duplicating_or_starving_modes_are_refused(pytester: pytest.Pytester, agent: ScriptedAgent, dist: str) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(4))
    result = run_n(pytester, agent, 2, f"--dist={dist}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*rollouts cannot run under --dist {dist}*use --dist load*"])
    assert agent.requests == []


def test_refused_for_a_suite_without_options(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "s" / "data.jsonl", tasks(4))
    (pytester.path / "s" / "rollouts.toml").write_text(
        f'datasets = ["data.jsonl"]\nagent = "a"\n[agents.a]\nurl = "{agent.url}"\n'
    )
    result = pytester.runpytest_subprocess(*QUIET, "-n", "2", "--dist=worksteal", "s")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, "xdist reports a worker's collection error as a failure"
    result.stdout.fnmatch_lines(["*rollouts cannot run under --dist worksteal*"])
    assert agent.requests == []
