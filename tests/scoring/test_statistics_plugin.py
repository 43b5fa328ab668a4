"""The statistics options in real pytest sessions: baseline and regression gate, Manski gate, pass@k, group-by."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats

from ..agents import Reply, ScriptedAgent
from ..helpers import aggregate, run_rollouts, write_rows

GOOD = [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
WORSE = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def by_row(rewards: Sequence[float | None]):
    """Reward ``rewards[row["n"]]``; None answers 500 (a failed rollout)."""

    def behaviour(row: dict, seen: int) -> Reply:
        reward = rewards[row["n"]]
        return Reply(status=500, json={}) if reward is None else Reply(json={"reward": reward})

    return behaviour


def session(
    pytester: pytest.Pytester,
    rewards: Sequence[float | None],
    *args: str,
    out: str = "out/r.jsonl",
    data: str = "data.jsonl",
) -> pytest.RunResult:
    with ScriptedAgent(by_row(rewards)) as agent:
        return run_rollouts(pytester, data, f"--rollouts-agent={agent.url}", "--rollouts-retries=0", *args, out=out)


def dataset(pytester: pytest.Pytester, name: str = "data.jsonl", ns: Sequence[int] = range(12)) -> None:
    rows = [
        {"n": n, "difficulty": "hard" if n % 2 else "easy", "responses_create_params": {"input": f"q{n}"}} for n in ns
    ]
    write_rows(pytester.path / name, rows)


def statistics(pytester: pytest.Pytester, out: str = "out/r.jsonl") -> dict:
    [entry] = json.loads((pytester.path / out.replace(".jsonl", "_aggregate_metrics.json")).read_text())
    return entry


def test_a_regression_beyond_max_regression_fails_the_run_with_exit_10_and_the_numbers(
    pytester: pytest.Pytester,
) -> None:
    dataset(pytester)
    assert session(pytester, GOOD, out="base/r.jsonl").ret == 0
    result = session(pytester, WORSE, "--rollouts-baseline=base/r.jsonl", "--rollouts-max-regression=0.05")
    assert result.ret == 10
    result.stdout.fnmatch_lines(
        [
            "default: vs baseline 0.9167 -> 0.6667: -0.2500, 95% CI [[]-0.*, *] (paired t, 12 tasks); "
            "mcnemar p=0.3750 (solved in one run only: 1 the candidate, 4 the baseline); "
            "Manski [[]-0.2500, -0.2500[]]; fixed 1: 4 (0->1); broke 4: 1 (1->0), 3 (1->0), 6 (1->0) and 1 more",
            "--rollouts-max-regression 0.05: default: lower bound of candidate - baseline -0.* (difference -0.2500, *",
            "EVAL FAILED: the candidate may be more than 0.05 worse than the baseline *",
        ]
    )
    both = session(
        pytester,
        WORSE,
        "--rollouts-baseline=base/r.jsonl",
        "--rollouts-max-regression=0.05",
        "--rollouts-fail-under=0.9",
        out="both/r.jsonl",
    )
    assert both.ret == 7, "the fail-under gate's code stands, as documented"
    both.stdout.fnmatch_lines(
        ["EVAL FAILED: mean reward * is below --rollouts-fail-under 0.9.", "EVAL FAILED: the candidate may be more *"]
    )  # the regression's line was left out when another gate failed too
    written = statistics(pytester)["statistics"]["baseline_comparison"]
    shown = (written["baseline"], written["paired_by"], written["max_regression"])
    assert shown == ("base/r.jsonl", "task index", 0.05)
    assert written["difference/reward"] == pytest.approx(-0.25)
    assert written["p_value"] == pytest.approx(stats.binomtest(1, 5, 0.5).pvalue)
    assert [task for task, _, _ in written["broke"]] == ["1", "3", "6", "9"]


def test_a_baseline_comparison_that_passes_prints_its_lines_and_exits_0(pytester: pytest.Pytester) -> None:
    dataset(pytester)
    """+0.25 over 12 tasks, 95% CI [-0.1449, +0.6449]: a regression of 0.2 is ruled out (of 0.05 it is not)."""
    assert session(pytester, WORSE, out="base/r.jsonl").ret == 0
    result = session(pytester, GOOD, "--rollouts-baseline=base/r.jsonl", "--rollouts-max-regression=0.2")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["default: vs baseline * +0.2500, *", "--rollouts-max-regression 0.2: default: lower bound * -0.1449 *"]
    )
    assert "EVAL FAILED" not in result.stdout.str()


def test_max_regression_without_a_baseline_is_refused(pytester: pytest.Pytester) -> None:
    dataset(pytester)
    result = session(pytester, GOOD, "--rollouts-max-regression=0.05")
    assert result.ret == 4
    assert (
        "--rollouts-max-regression compares with a baseline run: give --rollouts-baseline PATH" in result.stderr.str()
    )


def test_a_baseline_that_is_the_runs_own_output_is_refused(pytester: pytest.Pytester) -> None:
    dataset(pytester)
    result = session(pytester, GOOD, "--rollouts-baseline=out/r.jsonl")
    assert result.ret == 4
    assert "--rollouts-baseline is this run's own output; name the earlier run's file" in result.stderr.str()


@pytest.mark.parametrize("value", ["1,0", "0", "a,b", "0,inf"])
def test_a_bad_reward_range_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    dataset(pytester)
    result = session(pytester, GOOD, f"--rollouts-reward-range={value}")
    assert result.ret == 4
    assert "--rollouts-reward-range" in result.stderr.str()


def test_gate_on_lower_bound_compares_the_manski_lower_bound(pytester: pytest.Pytester) -> None:
    """Two of 12 rollouts fail: the mean of the other ten is 0.9, its lower bound 9/12 = 0.75."""
    dataset(pytester)
    rewards = [None, None, *GOOD[2:]]
    assert session(pytester, rewards, "--rollouts-fail-under=0.8").ret == 0
    result = session(pytester, rewards, "--rollouts-fail-under=0.8", "--rollouts-gate-on=lower-bound")
    assert result.ret == 7
    result.stdout.fnmatch_lines(
        [
            "default: 95% CI [[]*] (exact); Manski bounds [[]0.7500, 0.9167] (2 unknown rollouts at 0,1)*",
            "--rollouts-fail-under 0.8: Manski lower bound of the mean reward 0.7500 over 12 rollouts",
            "EVAL FAILED: Manski lower bound of the mean reward 0.7500 is below --rollouts-fail-under 0.8.",
        ]
    )
    entry = statistics(pytester)["statistics"]
    assert entry["manski_bounds/reward"] == pytest.approx([0.75, 11 / 12])
    exact = stats.binomtest(9, 10).proportion_ci(0.95, "exact")  # 10 tasks: below the size for Wilson
    assert entry["ci_95/reward"] == pytest.approx([exact.low, exact.high])
    assert (entry["ci_method"], entry["num_rollouts_unknown"], entry["reward_range"]) == ("exact", 2, [0.0, 1.0])


def test_pass_k_takes_the_ks_asked_and_names_the_tasks_with_too_few(pytester: pytest.Pytester) -> None:
    dataset(pytester, ns=range(3))

    def flaky(row: dict, seen: int) -> Reply:  # task 2's third rollout fails
        if row["n"] == 2 and row["_ng_rollout_index"] == 2:
            return Reply(status=500, json={})
        return Reply(json={"reward": float(row["_ng_rollout_index"] % 2 == 0 or row["n"] == 0)})

    with ScriptedAgent(flaky) as agent:
        args = (
            f"--rollouts-agent={agent.url}",
            "--rollouts-retries=0",
            "--rollouts-repeats=3",
            "--rollouts-pass-k=3,1",
        )
        result = run_rollouts(pytester, "data.jsonl", *args)
        assert result.ret == 0
        # pass^k beside pass@k in the summary (it was only in the metrics file).
        result.stdout.fnmatch_lines(
            ["default: mean reward *; pass@1 *, pass@3 1.0000; pass^3 0.5000 [[]local metrics[]]"]
        )
        asked_too_many = run_rollouts(pytester, "data.jsonl", *args[:-1], "--rollouts-pass-k=1,5", out="more/r.jsonl")
        asked_too_many.stdout.fnmatch_lines(["default: mean reward *; pass@1 *, pass@5 - (too few rollouts) *"])
    agent_metrics = statistics(pytester)["agent_metrics"]
    assert {k for k in agent_metrics if k.startswith("pass")} == {
        *(f"pass@{k}/{what}" for k in (1, 3) for what in ("reward", "num_tasks", "num_tasks_excluded")),
        "pass^1/reward",
        "pass^3/reward",
    }
    # Task 0: 3 of 3; task 1: 2 of 3 (rollouts 0, 2); task 2: 1 of 2 scored, too few for k=3.
    assert (agent_metrics["pass@3/num_tasks"], agent_metrics["pass@3/num_tasks_excluded"]) == (2, 1)
    assert agent_metrics["pass^3/reward"] == pytest.approx((1 + 0) / 2)
    assert agent_metrics["pass^1/reward"] == pytest.approx((1 + 2 / 3 + 1 / 2) / 3)
    assert agent_metrics["pass@3/reward"] == pytest.approx(1.0)


def test_group_by_splits_the_statistics_by_field_and_by_dataset(pytester: pytest.Pytester) -> None:
    dataset(pytester, "a.jsonl", range(6))
    dataset(pytester, "b.jsonl", range(6, 12))
    with ScriptedAgent(by_row(WORSE)) as agent:
        result = run_rollouts(
            pytester, "a.jsonl", "b.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-group-by=difficulty"
        )
    assert result.ret == 0
    entry = statistics(pytester)["statistics"]
    assert entry["group_by"] == "difficulty"
    by_field = entry["by_field"]
    assert set(by_field) == {"easy", "hard"}
    assert by_field["easy"]["mean/reward"] == pytest.approx(sum(WORSE[0::2]) / 6)
    assert by_field["hard"]["mean/reward"] == pytest.approx(sum(WORSE[1::2]) / 6)
    assert set(entry["by_dataset"]) == {"a.jsonl", "b.jsonl"}
    assert entry["by_dataset"]["b.jsonl"]["mean/reward"] == pytest.approx(sum(WORSE[6:]) / 6)
    assert entry["by_dataset"]["a.jsonl"]["ci_method"] == "exact"
    easy, hard = sum(WORSE[0::2]) / 6, sum(WORSE[1::2]) / 6
    result.stdout.fnmatch_lines(
        [
            f"default [[]dataset a.jsonl[]]: mean reward {sum(WORSE[:6]) / 6:.4f} over 6 rollouts;"
            " 95% CI [[]*[]] (exact)",
            f"default [[]dataset b.jsonl[]]: mean reward {sum(WORSE[6:]) / 6:.4f} over 6 rollouts; *",
            f"default [[]difficulty=easy[]]: mean reward {easy:.4f} over 6 rollouts; *",
            f"default [[]difficulty=hard[]]: mean reward {hard:.4f} over 6 rollouts; *",
        ]
    )


def test_metrics_per_dataset_file_come_without_group_by(pytester: pytest.Pytester) -> None:
    """Per dataset as well as per agent, asked or not; a missing rollout's bounds are its dataset's."""
    dataset(pytester, "a.jsonl", range(6))
    dataset(pytester, "b.jsonl", range(6, 12))
    rewards: list[float | None] = list(WORSE)
    rewards[7] = None
    with ScriptedAgent(by_row(rewards)) as agent:
        result = run_rollouts(pytester, "a.jsonl", "b.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retries=0")
    assert result.ret == 0
    entry = statistics(pytester)["statistics"]
    assert "by_field" not in entry and "group_by" not in entry
    assert entry["by_dataset"]["b.jsonl"]["num_rollouts_unknown"] == 1
    assert entry["by_dataset"]["a.jsonl"]["num_rollouts_unknown"] == 0
    b_scored = [r for r in rewards[6:] if r is not None]
    low, high = sum(b_scored) / 6, (sum(b_scored) + 1) / 6
    result.stdout.fnmatch_lines(
        [
            "default [[]dataset b.jsonl[]]: mean reward * over 5 rollouts; *;"
            f" Manski bounds [[]{low:.4f}, {high:.4f}[]] (1 unknown)"
        ]
    )


def test_a_group_with_a_baseline_and_breakdowns_takes_at_most_three_lines(pytester: pytest.Pytester) -> None:
    """Its score, its interval and bounds, its comparison: each breakdown value is a group of its own."""
    dataset(pytester)
    assert session(pytester, GOOD, out="base/r.jsonl").ret == 0
    result = session(
        pytester,
        WORSE,
        "--rollouts-baseline=base/r.jsonl",
        "--rollouts-max-regression=0.7",
        "--rollouts-group-by=difficulty",
    )
    assert result.ret == 0
    own = [line for line in result.outlines if line.startswith("default: ")]
    assert len(own) == 3, own
    assert [line.split(": ")[1].split(" ")[0] for line in own] == ["mean", "95%", "vs"]
    assert sum(line.startswith("--rollouts-max-regression 0.7: ") for line in result.outlines) == 1
    assert sum(line.startswith("default [difficulty=") for line in result.outlines) == 2


def test_a_breakdown_with_many_values_shows_ten_and_counts_the_rest(pytester: pytest.Pytester) -> None:
    dataset(pytester)
    with ScriptedAgent(by_row(WORSE)) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-group-by=n")
    assert result.ret == 0
    assert sum(line.startswith("default [n=") for line in result.outlines) == 10
    result.stdout.fnmatch_lines(["default: 2 more n values in the metrics file"])
    assert len(statistics(pytester)["statistics"]["by_field"]) == 12


def test_the_python_api_judges_a_regression_as_the_plugin_does(pytester: pytest.Pytester) -> None:
    from pytest_rollouts import CollectionConfig, run

    dataset(pytester)
    assert session(pytester, GOOD, out="base/r.jsonl").ret == 0
    with ScriptedAgent(by_row(WORSE)) as agent:
        config = CollectionConfig(
            input="data.jsonl",
            out="api/r.jsonl",
            agents={"default": agent.url},
            baseline="base/r.jsonl",
            max_regression=0.05,
            reward_range="0,1",
        )
        result = run(config)
    assert result.exit_status == 10
    assert "EVAL FAILED: the candidate may be more than 0.05 worse than the baseline" in result.summary()


def test_the_summary_says_the_smallest_change_the_run_detects(pytester: pytest.Pytester) -> None:
    """Issue 20's power advice, one line in the summary: it was only in `pytest-rollouts power`.
    Checked against the normal-quantile formula with scipy: z(0.975) + z(0.8), paired with
    correlation 0.5, one rollout per task (all the spread is between tasks)."""
    dataset(pytester)
    result = session(pytester, WORSE)
    entry = statistics(pytester)["statistics"]
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    between = float(np.var(WORSE, ddof=1))
    expected = z * (2 * (1 - 0.5) * between / len(WORSE)) ** 0.5
    assert entry["minimum_detectable_difference"] == pytest.approx(expected, rel=1e-9)
    result.stdout.fnmatch_lines([f"default: 95% CI *; detects a change of {expected:.4f} (80% power)"])


def test_rewards_outside_the_range_give_no_bounds_but_say_so(pytester: pytest.Pytester) -> None:
    """The upper 'bound' fell under the scored mean: no bound at all (found by a black-box review)."""
    dataset(pytester)
    result = session(pytester, [None, *GOOD[1:]], "--rollouts-reward-range=0,0.5")
    entry = statistics(pytester)["statistics"]
    assert entry["manski_bounds/reward"] is None and entry["rewards_outside_range"] == [0.0, 1.0]
    result.stdout.fnmatch_lines(
        ["default: no Manski bounds: rewards from 0 to 1 fall outside the reward range 0,0.5 (--rollouts-reward-range)"]
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rollouts-baseline=nope/r.jsonl"], "--rollouts-baseline: nope/r.jsonl is not there"),
        (
            ["--rollouts-no-aggregate", "--rollouts-pass-k=3", "--rollouts-gate-on=lower-bound"],
            "--rollouts-pass-k, --rollouts-gate-on need the metrics that --rollouts-no-aggregate skips",
        ),
    ],
    ids=["missing-baseline", "no-metrics"],
)
def test_statistics_options_that_cannot_work_are_refused_before_the_run(
    pytester: pytest.Pytester, args: list[str], words: str
) -> None:
    """A missing baseline was refused only after every rollout ran; under --rollouts-no-aggregate the
    options did nothing, unsaid (found by a black-box review)."""
    dataset(pytester)
    with ScriptedAgent(by_row(GOOD)) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", *args)
        assert agent.requests == []
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert words in result.stderr.str()


def test_the_interval_stays_inside_the_reward_range(pytester: pytest.Pytester) -> None:
    """t on two tasks read 95% CI [-5.8531, 6.8531] for rewards in [0, 1] (rewards not 0 or 1: t)."""
    dataset(pytester, ns=range(2))
    assert session(pytester, [1.0, 0.25], "--rollouts-repeats=2").ret == 0
    entry = statistics(pytester)["statistics"]
    assert entry["ci_method"] == "t" and entry["ci_95/reward"] == [0.0, 1.0]


def test_aggregate_scores_compares_and_gates_with_the_runs_statistics_options(pytester: pytest.Pytester) -> None:
    """A merge rescored with the run's statistics options reads as the run would: the paired gate's
    exit 10 and numbers, the breakdowns, pass@k for the k asked, the gate on Manski's lower bound."""

    dataset(pytester)
    assert session(pytester, GOOD, out="base/r.jsonl").ret == 0
    failing: list[float | None] = list(WORSE)
    failing[0] = None
    assert session(pytester, failing, "--rollouts-repeats=2").ret == 0
    base = session(pytester, GOOD, "--rollouts-repeats=2", out="base2/r.jsonl")
    assert base.ret == 0
    merged = aggregate(
        pytester.path,
        "--input=out/r.jsonl",
        "--out=m/r.jsonl",
        "--baseline=base2/r.jsonl",
        "--max-regression=0.05",
        "--group-by=difficulty",
        "--pass-k=1,2",
    )
    assert merged.returncode == 10, merged.stderr
    lines = merged.stdout.splitlines()
    assert [line.split(": ")[1].split(" ")[0] for line in lines if line.startswith("default: ")] == [
        "mean",
        "95%",
        "vs",
    ]
    assert any(line.startswith("default [difficulty=easy]: mean reward ") for line in lines)
    assert any(
        line.startswith("--max-regression 0.05: default: lower bound of candidate - baseline -") for line in lines
    )
    assert "EVAL FAILED: the candidate may be more than 0.05 worse" in merged.stderr
    [entry] = json.loads((pytester.path / "m/r_aggregate_metrics.json").read_text())
    assert entry["statistics"]["baseline_comparison"]["max_regression"] == 0.05
    assert set(entry["statistics"]["by_field"]) == {"easy", "hard"}
    assert {"pass@1/reward", "pass@2/reward"} <= set(entry["agent_metrics"])

    # Two failed rollouts (task 0, both repeats) at the floor: the lower bound is (sum of the rest) / 24.
    lower = 2 * sum(r for r in WORSE[1:]) / 24
    gated = aggregate(
        pytester.path, "--input=out/r.jsonl", "--out=g/r.jsonl", "--gate-on=lower-bound", f"--fail-under={lower + 0.01}"
    )
    assert gated.returncode == 7, gated.stdout + gated.stderr
    assert (
        f"--fail-under {lower + 0.01:g}: Manski lower bound of the mean reward {lower:.4f} over 24 rollouts"
        in gated.stdout
    )
    assert (
        aggregate(
            pytester.path,
            "--input=out/r.jsonl",
            "--out=g/r.jsonl",
            "--gate-on=lower-bound",
            f"--fail-under={lower - 0.01}",
        ).returncode
        == 0
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--max-regression=0.1",), "--max-regression compares with a baseline run: give --baseline PATH"),
        (("--baseline=none/r.jsonl",), "--baseline: none/r.jsonl is not there"),
        (("--reward-range=1,0",), "--reward-range: must be LO,HI with LO < HI"),
        (("--pass-k=0",), "--pass-k: must be whole numbers at least 1"),
        (("--gate-on=median",), "--gate-on: "),
    ],
)
def test_aggregate_refuses_bad_statistics_options_as_a_run_does(
    pytester: pytest.Pytester, args: tuple[str, ...], words: str
) -> None:

    dataset(pytester)
    assert session(pytester, GOOD).ret == 0
    refused = aggregate(pytester.path, "--input=out/r.jsonl", "--out=m/r.jsonl", *args)
    assert refused.returncode == 4
    assert words in refused.stderr and "Traceback" not in refused.stderr
    assert not (pytester.path / "m").exists()


def test_a_breakdown_by_a_field_that_is_not_text_names_its_values_as_json(pytester: pytest.Pytester) -> None:
    """They read as Python printed them: ``[r={'a': -2.5}]``, ``True``."""
    rows = [
        {"n": n, "tags": {"level": n % 2}, "hard": n % 2 == 1, "responses_create_params": {"input": f"q{n}"}}
        for n in range(12)
    ]
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent(by_row(WORSE)) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-group-by=tags")
        assert result.ret == 0
        result.stdout.fnmatch_lines(['default [[]tags={"level":0}[]]: mean reward *'])
        assert set(statistics(pytester)["statistics"]["by_field"]) == {'{"level":0}', '{"level":1}'}
        flagged = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-group-by=hard", out="b/r.jsonl"
        )
    flagged.stdout.fnmatch_lines(["default [[]hard=true[]]: mean reward *"])


def test_a_run_that_failed_most_tasks_fails_the_paired_gate_unless_scored_only(pytester: pytest.Pytester) -> None:
    """Before, the run's --rollouts-baseline gate and aggregate's compared only the tasks both runs
    scored: 9 failed tasks of 12 passed --rollouts-max-regression 0.05."""

    dataset(pytester)
    assert session(pytester, GOOD, out="base/r.jsonl").ret == 0
    failing: list[float | None] = [*GOOD[:3], *[None] * 9]
    gated = ("--rollouts-baseline=base/r.jsonl", "--rollouts-max-regression=0.05")
    result = session(pytester, failing, *gated)
    assert result.ret == 10
    result.stdout.fnmatch_lines(
        [
            "--rollouts-max-regression 0.05: default: lower bound of candidate - baseline -* with every rollout "
            "without a score at its worst for the candidate (95% CI over 12 tasks; 9 of 12 paired tasks have "
            "rollouts without a score; --rollouts-gate-scored-only judges the 3 tasks both runs scored)",
        ]
    )
    assert "EVAL FAILED: the candidate may be more than 0.05 worse" in result.stdout.str()
    assert session(pytester, failing, *gated, "--rollouts-gate-scored-only").ret == 0
    pytester.makeini("[pytest]\nrollouts_gate_scored_only = true\n")
    scored_only = session(pytester, failing, *gated)
    assert scored_only.ret == 0
    scored_only.stdout.fnmatch_lines(["* 95% CI over 3 tasks; ini rollouts_gate_scored_only: 9 tasks lack scores)"])
    pytester.makeini("[pytest]\n")
    merged = aggregate(
        pytester.path, "--input=out/r.jsonl", "--out=m/r.jsonl", "--baseline=base/r.jsonl", "--max-regression=0.05"
    )
    assert merged.returncode == 10, merged.stderr
    assert "--gate-scored-only judges the 3 tasks both runs scored" in merged.stdout
    merged = aggregate(
        pytester.path, "--input=out/r.jsonl", "--out=m2/r.jsonl", "--baseline=base/r.jsonl", "--max-regression=0.05",
        "--gate-scored-only",
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    refused = session(pytester, failing, "--rollouts-gate-scored-only")
    assert refused.ret == 4
    said = refused.stderr.str()
    assert "--rollouts-gate-scored-only says how --rollouts-max-regression judges: give it DELTA" in said
