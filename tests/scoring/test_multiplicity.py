"""Many groups gated at once: Holm and Benjamini-Hochberg adjusted p-values, in the gate, ``compare``,
a run's summary and its report."""

from __future__ import annotations

import json
import random
import re

import pytest
from scipy import stats

from pytest_rollouts.cli import main
from pytest_rollouts.scoring.compare_runs import RunComparison
from pytest_rollouts.scoring.distributions import t_ppf
from pytest_rollouts.scoring.multiplicity import adjust
from pytest_rollouts.scoring.paired import TaskRewards, compare
from pytest_rollouts.scoring.regression import RegressionGate

from ..agents import Reply, ScriptedAgent
from ..helpers import run_rollouts, write_rows


def test_holm_and_bh_of_a_hand_computed_family() -> None:
    # Sorted 0.005, 0.01, 0.03, 0.04. Holm: 4(0.005), 3(0.01), max(.., 2(0.03)), max(.., 1(0.04)).
    # BH: 4(0.005)/1, 4(0.01)/2, 4(0.03)/3, 4(0.04)/4, then the running minimum from the top.
    p = [0.01, 0.04, 0.03, 0.005]
    assert adjust(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjust(p, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust([0.5, None, 0.9], "holm") == [pytest.approx(1.0), None, pytest.approx(1.0)]
    assert adjust([0.2, None], "none") == [0.2, None]


def _holm_rejects(p: list[float], alpha: float) -> set[int]:
    """Holm's procedure as its paper states it: step down while p_(j) <= alpha / (m - j)."""
    order, rejected = sorted(range(len(p)), key=p.__getitem__), set()
    for j, i in enumerate(order):
        if p[i] > alpha / (len(p) - j):
            break
        rejected.add(i)
    return rejected


def _bh_rejects(p: list[float], alpha: float) -> set[int]:
    """BH as its paper states it: reject the k smallest, k the largest with p_(k) <= k alpha / m."""
    order = sorted(range(len(p)), key=p.__getitem__)
    k = max((j + 1 for j, i in enumerate(order) if p[i] <= (j + 1) * alpha / len(p)), default=0)
    return set(order[:k])


@pytest.mark.parametrize("method, rejects", [("holm", _holm_rejects), ("bh", _bh_rejects)])
def test_an_adjusted_p_value_is_the_smallest_level_the_procedure_rejects_at(method, rejects) -> None:
    """The definition (Wright 1992, "Adjusted P-values for simultaneous inference"): at every level,
    the hypotheses the procedure rejects are those whose adjusted p-value is at most that level."""
    rng = random.Random(35)
    for _ in range(200):
        p = [rng.random() ** 3 for _ in range(rng.randint(1, 9))]
        adjusted = adjust(p, method)
        for alpha in (0.001, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5):
            assert {i for i, a in enumerate(adjusted) if a <= alpha} == rejects(p, alpha), (p, alpha)


def _group(name: str, diffs: list[float]) -> list[tuple[TaskRewards, TaskRewards]]:
    return [(TaskRewards(str(i), (0.5,), 1), TaskRewards(str(i), (0.5 + d,), 1)) for i, d in enumerate(diffs)]


def test_the_gate_p_value_is_scipys_one_sided_t_test_and_agrees_with_the_interval() -> None:
    rng = random.Random(7)
    gate = RegressionGate(0.05)
    for _ in range(50):
        diffs = [rng.gauss(-0.02, 0.08) for _ in range(rng.randint(3, 40))]
        comparison = compare("g", _group("g", diffs))
        expected = stats.ttest_1samp(diffs, -0.05, alternative="greater").pvalue
        assert gate.p_value(comparison) == pytest.approx(expected, rel=1e-6, abs=1e-12)
        assert (gate.p_value(comparison) <= 0.025) == (comparison.interval.low >= -0.05)


def test_three_groups_that_each_pass_alone_fail_under_holm_and_pass_under_bh() -> None:
    """Each group's one-sided p-value is 0.015: below 2.5% alone; Holm's smallest is 3 x 0.015 = 0.045
    (fails), BH's m p / m = 0.015 (passes)."""
    diffs = [0.01 * ((7 * i) % 11 - 5) for i in range(20)]
    mean, se = stats.tmean(diffs), stats.sem(diffs)
    margin = t_ppf(1 - 0.015, 19) * se - mean
    comparisons = tuple(compare(g, _group(g, diffs)) for g in ("a", "b", "c"))
    gate = RegressionGate(margin)
    assert [gate.p_value(c) for c in comparisons] == pytest.approx([0.015] * 3)

    def judged(correction: str) -> RunComparison:
        return RunComparison(None, None, None, comparisons, None, gate, correction)  # type: ignore[arg-type]

    assert judged("none").failure is None
    assert judged("bh").failure is None
    failure = judged("holm").failure
    assert failure is not None and failure.count("Holm 0.0450") == 3
    assert "p=0.0150 that it is" in gate.measures(comparisons, "holm")


# Two agents, 20 tasks each, in one run: a release gated on two suites at once.
TASKS = 20
BASE = {"a": [1.0] * 14 + [0.0] * 6, "b": [1.0] * 10 + [0.0] * 10}
# Agent a breaks 5 tasks and fixes none; b fixes 4.
CAND = {"a": [1.0] * 9 + [0.0] * 11, "b": [1.0] * 14 + [0.0] * 6}


def two_agent_run(pytester: pytest.Pytester, rewards: dict[str, list[float]], out: str, *args: str):
    rows = [
        {"n": n, "task_id": f"{agent}{n}", "agent_ref": {"name": agent}, "responses_create_params": {"input": f"q{n}"}}
        for agent in ("a", "b")
        for n in range(TASKS)
    ]
    write_rows(pytester.path / "data.jsonl", rows)

    def behaviour(row: dict, seen: int) -> Reply:
        return Reply(json={"reward": rewards[row["agent_ref"]["name"]][row["n"]]})

    with ScriptedAgent(behaviour) as server:
        agents = [f"--rollouts-agent={name}={server.url}" for name in ("a", "b")]
        return run_rollouts(pytester, "data.jsonl", *agents, *args, out=out)


def _p_values(text: str, method: str) -> list[tuple[float, float]]:
    """(raw, adjusted) test p-values as the lines print them."""
    found = re.findall(rf"mcnemar p=([0-9.]+) .*?; {method}-adjusted over 2 groups p=([0-9.]+)", text)
    return [(float(raw), float(adj)) for raw, adj in found]


def test_compare_summary_and_report_show_raw_and_adjusted_p_values(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    assert two_agent_run(pytester, BASE, "base/r.jsonl").ret == 0
    result = two_agent_run(
        pytester, CAND, "cand/r.jsonl", "--rollouts-baseline=base/r.jsonl", "--rollouts-correction=holm"
    )
    assert result.ret == 0, result.outlines[-20:]
    summary = _p_values(result.stdout.str(), "Holm")
    raw = [stats.binomtest(0, 5).pvalue, stats.binomtest(4, 4).pvalue]
    assert summary == [(round(r, 4), round(a, 4)) for r, a in zip(raw, adjust(raw, "holm"), strict=True)]
    capsys.readouterr()
    args = ["compare", "base/r.jsonl", "cand/r.jsonl", "--correction", "bh", "--max-regression", "0.1"]
    code = main([*args, "--json", "cmp.json"])
    out, err = capsys.readouterr()
    assert code == 10, err
    assert _p_values(out, "Benjamini-Hochberg") == [
        (round(r, 4), round(a, 4)) for r, a in zip(raw, adjust(raw, "bh"), strict=True)
    ]
    groups = json.loads((pytester.path / "cmp.json").read_text())["groups"]
    assert [g["p_value_adjusted"] for g in groups] == pytest.approx(adjust(raw, "bh"))
    gate_raw = [g["regression_p_value"] for g in groups]
    assert [g["regression_p_value_adjusted"] for g in groups] == pytest.approx(adjust(gate_raw, "bh"))
    assert "Benjamini-Hochberg" in err and "that it is 0.1 worse" in err
    code = main(["report", "cand/r.jsonl", "--baseline", "base/r.jsonl", "--correction", "holm", "-o", "r.html"])
    assert code == 0
    page = (pytester.path / "r.html").read_text()
    assert '"p_value_adjusted"' in page and "Holm-adjusted over 2 groups" in page


def test_a_correction_that_is_none_of_the_three_or_without_a_baseline_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    write_rows(pytester.path / "data.jsonl", [{"responses_create_params": {"input": "q"}}])
    result = run_rollouts(pytester, "data.jsonl", "--rollouts-agent=http://127.0.0.1:9", "--rollouts-correction=sidak")
    assert result.ret == 4
    assert "--rollouts-correction" in result.stderr.str()
    for asked in ("--rollouts-correction=holm", "--rollouts-sequential"):
        result = run_rollouts(pytester, "data.jsonl", "--rollouts-agent=http://127.0.0.1:9", asked)
        assert result.ret == 4
        name = asked.split("=")[0]
        assert f"{name} compares with a baseline run: give --rollouts-baseline PATH" in result.stderr.str()
