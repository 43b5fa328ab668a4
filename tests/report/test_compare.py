"""``pytest-rollouts compare`` and ``power`` on real runs: two pytest sessions against a real agent."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

import pytest
from scipy import stats

from pytest_rollouts.cli import main

from ..agents import Reply, ScriptedAgent
from ..helpers import run_rollouts, write_rows

BASELINE = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
# Fixes tasks 1, 3, 6 and 9; breaks task 4.
BETTER = [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def by_row(rewards: Sequence[float | None]):
    """An agent whose reward for a row is ``rewards[row["n"]]``; None answers 500 (a failed rollout)."""

    def behaviour(row: dict, seen: int) -> Reply:
        reward = rewards[row["n"]]
        return Reply(status=500, json={}) if reward is None else Reply(json={"reward": reward})

    return behaviour


def collect(
    pytester: pytest.Pytester, out: str, rewards: Sequence[float | None], *args: str, data: str = "data.jsonl"
) -> None:
    with ScriptedAgent(by_row(rewards)) as agent:
        result = run_rollouts(pytester, data, f"--rollouts-agent={agent.url}", "--rollouts-retries=0", *args, out=out)
    assert result.ret == 0, result.outlines[-20:]


def dataset(
    pytester: pytest.Pytester, name: str = "data.jsonl", order: Sequence[int] = range(12), ids: bool = False
) -> None:
    rows = [
        {"n": n, "responses_create_params": {"input": f"q{n}"}, **({"task_id": f"t{n}"} if ids else {})} for n in order
    ]
    write_rows(pytester.path / name, rows)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # the sessions' own output
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_compare_pairs_by_index_and_reports_difference_interval_mcnemar_and_flips(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset(pytester)
    collect(pytester, "base/r.jsonl", BASELINE)
    collect(pytester, "cand/r.jsonl", BETTER)
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--json", "cmp.json")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith("paired by task index")
    p = stats.binomtest(4, 5, 0.5).pvalue
    assert lines[1].startswith("default: candidate - baseline +0.2500, 95% CI [")
    assert f"mcnemar p={p:.4f} (solved in one run only: 4 the candidate, 1 the baseline)" in lines[1]
    assert "baseline 0.6667, candidate 0.9167; Manski bounds of the difference [+0.2500, +0.2500]" in lines[2]
    assert lines[3].startswith(
        "default: changed most: fixed 4: 1 (0->1), 3 (0->1), 6 (0->1), 9 (0->1); broke 1: 4 (1->0)"
    )
    assert len(lines) == 4, "at most three lines per group"
    written = json.loads((pytester.path / "cmp.json").read_text())
    [group] = written["groups"]
    assert group["difference/reward"] == pytest.approx(0.25)
    assert group["p_value"] == pytest.approx(p)
    assert group["test"] == "mcnemar" and group["discordant_fixed_broke"] == [4, 1]
    assert [t[0] for t in group["broke"]] == ["4"]


def test_max_regression_fails_with_its_own_exit_code_and_the_numbers(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset(pytester)
    collect(pytester, "base/r.jsonl", BETTER)
    collect(pytester, "cand/r.jsonl", BASELINE)
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--max-regression", "0.05")
    assert code == 10
    assert "--max-regression 0.05: default: lower bound of candidate - baseline -" in out, "the number is printed"
    assert "EVAL FAILED: the candidate may be more than 0.05 worse than the baseline" in err
    assert "(difference -0.2500, 95% CI over 12 tasks)" in err
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "base/r.jsonl", "--max-regression", "0.05")
    assert code == 0, "a run compared with itself is no regression"
    assert "lower bound of candidate - baseline +0.0000" in out


def test_runs_over_other_data_are_refused_by_index_and_paired_by_task_id(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset(pytester)
    shuffled = list(range(12))
    random.Random(3).shuffle(shuffled)
    dataset(pytester, "other.jsonl", shuffled)
    collect(pytester, "base/r.jsonl", BASELINE)
    collect(pytester, "cand/r.jsonl", BETTER, data="other.jsonl")
    code, _, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl")
    assert code == 8
    assert "the runs read different datasets (their manifests' sha256 differ)" in err
    assert "task_id field to pair by" in err
    dataset(pytester, ids=True)
    dataset(pytester, "other.jsonl", shuffled, ids=True)
    collect(pytester, "base2/r.jsonl", BASELINE)
    collect(pytester, "cand2/r.jsonl", BETTER, data="other.jsonl")
    code, out, err = cli(capsys, "compare", "base2/r.jsonl", "cand2/r.jsonl")
    assert code == 0, err
    assert "paired by task id" in out and "candidate - baseline +0.2500" in out
    assert "broke 1: 't4' (1->0)" in out


def test_a_flip_list_quotes_task_ids(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    """Unquoted, the id ``a, b`` read as two tasks, and one holding a newline broke the line."""
    names = {1: "a, b", 3: "c (0->1)", 6: "line\nbreak"}
    rows = [{"n": n, "task_id": names.get(n, f"t{n}"), "responses_create_params": {"input": "q"}} for n in range(12)]
    write_rows(pytester.path / "data.jsonl", rows)
    collect(pytester, "base/r.jsonl", BASELINE)
    collect(pytester, "cand/r.jsonl", BETTER)
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl")
    assert code == 0, err
    assert "fixed 4: 'a, b' (0->1), 'c (0->1)' (0->1), 'line\\nbreak' (0->1), 't9' (0->1); broke 1: 't4' (1->0)" in out


def test_unpaired_tasks_are_refused_unless_allow_partial_says_how_many(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """By task id: a run limited to fewer rows has another fingerprint, so indices could not pair it."""
    dataset(pytester, ids=True)
    collect(pytester, "base/r.jsonl", BASELINE)
    collect(pytester, "cand/r.jsonl", BETTER, "--rollouts-limit=8")
    code, _, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl")
    assert code == 8
    assert "4 tasks have no partner in the other run (by task id, per agent); --allow-partial" in err
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--allow-partial")
    assert code == 0, err
    assert "4 tasks without a partner in the other run left out of the comparison" in out
    assert "(paired t, 8 tasks)" in out


def test_failed_rollouts_widen_the_manski_bounds_of_the_difference(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset(pytester)
    collect(pytester, "base/r.jsonl", BASELINE)
    collect(pytester, "cand/r.jsonl", [None, None, *BETTER[2:]])
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--reward-range", "0,2")
    assert code == 0, err
    # Tasks 0 and 1 failed in the candidate: at 0 and at 2, against the baseline's 1 and 0.
    low = (sum(BETTER[2:]) - sum(BASELINE)) / 12
    high = (sum(BETTER[2:]) + 4 - sum(BASELINE)) / 12
    assert (
        f"Manski bounds of the difference [{low:+.4f}, {high:+.4f}] (unknown rollouts at 0,2); 2 paired tasks unscored"
        in out
    )
    assert "(paired t, 10 tasks)" in out


def test_power_reports_the_minimum_detectable_difference_and_tasks_needed(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset(pytester)
    collect(
        pytester,
        "base/r.jsonl",
        [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 0.5, 0.0, 0.25, 1.0, 0.5, 0.75],
        "--rollouts-repeats=2",
    )
    code, out, err = cli(capsys, "power", "base/r.jsonl", "--delta", "0.05")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("default: 12 tasks x 2 repeats; between-task variance ")
    assert "within-task 0.0000" in lines[0], "repeats of one task agree: no within-task variance"
    means = [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 0.5, 0.0, 0.25, 1.0, 0.5, 0.75]
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    variance = stats.tvar(means)
    assert f"minimum detectable difference {z * (variance / 12) ** 0.5:.4f} (80% power" in lines[1]
    needed = int(-(-((z / 0.05) ** 2 * variance) // 1))
    assert lines[2].startswith(f"default: to detect 0.05: {needed} tasks x 1 ({needed:,} rollouts")
    assert lines[3].startswith(f"default: to detect 0.05: {needed} tasks x 2 ({2 * needed:,} rollouts")
    assert cli(capsys, "power", "base/r.jsonl", "--delta", "0")[0] == 4
    assert cli(capsys, "power", "nowhere/r.jsonl")[0] == 4


def test_a_mistyped_compare_option_names_the_one_meant(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compare", "a.jsonl", "b.jsonl", "--allow-partal"])
    assert exc.value.code == 4
    assert "did you mean --allow-partial?" in capsys.readouterr().err


def test_pairing_by_index_needs_both_manifests(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    dataset(pytester)
    collect(pytester, "base/r.jsonl", BASELINE)
    collect(pytester, "cand/r.jsonl", BETTER)
    (pytester.path / "cand" / "r_run_manifest.json").unlink()
    code, _, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl")
    assert code == 8
    assert "no run manifest for cand/r.jsonl: task indices cannot be shown to name the same tasks" in err


@pytest.mark.parametrize(
    ("ids", "repeated"),
    [
        (["same", "same"], "task id 'same' names tasks 0 and 1 of agent 'default'"),
        # Two lone surrogates (halves of emoji) read back as one U+FFFD.
        (["\ud800", "\udc00"], "names tasks 0 and 1 of agent 'default'"),
    ],
)
def test_task_ids_that_repeat_pair_by_index_and_every_command_reads_the_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], ids: list[str], repeated: str
) -> None:
    """The run takes a dataset whose task ids repeat, as NeMo Gym does; compare, power, report
    --baseline and --rollouts-baseline refused its files ("task ids must be unique")."""
    rows = [{"n": n, "task_id": task_id, "responses_create_params": {"input": "q"}} for n, task_id in enumerate(ids)]
    rows += [{"n": n, "task_id": f"t{n}", "responses_create_params": {"input": "q"}} for n in range(2, 12)]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    collect(pytester, "base/r.jsonl", BASELINE)
    collect(pytester, "cand/r.jsonl", BETTER, "--rollouts-baseline=base/r.jsonl")
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl")
    assert code == 0, err
    assert "paired by task index (task ids repeat: base/r.jsonl: " in out and repeated in out, out
    assert "12 tasks" in out, out
    assert cli(capsys, "power", "base/r.jsonl")[0] == 0
    code, _, err = cli(capsys, "report", "cand/r.jsonl", "--baseline", "base/r.jsonl", "-o", "page.html")
    assert code == 0 and "cannot compare" not in (pytester.path / "page.html").read_text(), err
    # Over other datasets, indices name other tasks: refused, the repeated id named.
    rows.append({"n": 0, "task_id": "t12", "responses_create_params": {"input": "q"}})
    (pytester.path / "more.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    collect(pytester, "more/r.jsonl", [*BETTER, 1.0], data="more.jsonl")
    code, _, err = cli(capsys, "compare", "base/r.jsonl", "more/r.jsonl", "--allow-partial")
    assert code == 8
    assert "task ids cannot pair them (base/r.jsonl: " in err and repeated in err, err
    assert "give each task a task_id of its own to pair by" in err, err


def test_a_path_that_is_no_run_is_a_usage_error(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    """It was exit 8, 'the runs cannot be paired' (found by a black-box review)."""
    dataset(pytester)
    collect(pytester, "base/r.jsonl", BASELINE)
    code, _, err = cli(capsys, "compare", "base/r.jsonl", "nope/r.jsonl")
    assert code == 4
    assert "nope/r.jsonl is not there; name a run's <stem>.jsonl" in err


def agent_dataset(pytester: pytest.Pytester, agent: str) -> str:
    """The same twelve tasks (by task_id) routed to ``agent``: two models behind two agents."""
    name = f"{agent}.jsonl"
    rows = [
        {"n": n, "task_id": f"t{n}", "agent_ref": {"name": agent}, "responses_create_params": {"input": f"q{n}"}}
        for n in range(12)
    ]
    write_rows(pytester.path / name, rows)
    return name


def test_runs_of_differently_named_agents_pair_by_pair_or_alone(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    for agent, rewards in (("gpt", BASELINE), ("llama", BETTER)):
        data = agent_dataset(pytester, agent)
        with ScriptedAgent(by_row(rewards)) as server:
            result = run_rollouts(pytester, data, f"--rollouts-agent={agent}={server.url}", out=f"{agent}/r.jsonl")
        assert result.ret == 0, result.outlines[-20:]
    code, out, err = cli(capsys, "compare", "gpt/r.jsonl", "llama/r.jsonl")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith("paired by task id; agent gpt (baseline) with llama (candidate)")
    assert lines[1].startswith("llama: candidate - baseline +0.2500, 95% CI [")
    code, out, err = cli(capsys, "compare", "gpt/r.jsonl", "llama/r.jsonl", "--pair", "gpt=llama")
    assert code == 0 and "llama: candidate - baseline +0.2500" in out
    code, _, err = cli(capsys, "compare", "gpt/r.jsonl", "llama/r.jsonl", "--pair", "gtp=llama")
    assert code == 8 and "no agent 'gtp' in the baseline run (it has gpt)" in err
    code, _, err = cli(capsys, "compare", "gpt/r.jsonl", "llama/r.jsonl", "--pair", "gpt")
    assert code == 4 and "--pair: must be BASELINE_AGENT=CANDIDATE_AGENT" in err


def test_power_refuses_a_run_with_fewer_than_two_scored_tasks(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset(pytester, order=range(2))
    collect(pytester, "one/r.jsonl", [1.0, None])
    code, out, err = cli(capsys, "power", "one/r.jsonl")
    assert code == 4 and out == ""
    assert "default: need at least two tasks with a score to measure how tasks differ (it has 1)" in err
    assert "no agent has two tasks with a score; nothing to size" in err


def test_task_ids_of_digits_int_refuses_pair_in_compare_report_and_a_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "①" and "²" pass ``str.isdigit`` but not ``int``: compare, report --baseline and a run with
    --rollouts-baseline ended in a ValueError traceback."""
    ids = ["①", "²", "10", "9", "t1", "٣"]
    rows = [{"n": n, "task_id": task_id, "responses_create_params": {"input": "q"}} for n, task_id in enumerate(ids)]
    write_rows(pytester.path / "data.jsonl", rows)
    collect(pytester, "base/r.jsonl", [1.0] * 6)
    collect(pytester, "cand/r.jsonl", [0.0] * 6, "--rollouts-baseline=base/r.jsonl")
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl")
    assert code == 0, err
    assert "broke 6: 10 (1->0), 9 (1->0), 't1' (1->0), '²' (1->0), '٣' (1->0) and 1 more" in out
    assert cli(capsys, "report", "cand/r.jsonl", "--baseline", "base/r.jsonl", "-o", "r.html")[0] == 0


def strict_json(text: str) -> dict:
    """JSON as the standard has it: Python's json reads NaN and Infinity, which are no JSON."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_json_of_a_comparison_without_a_task_scored_in_both_runs_is_json(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """It wrote bare NaN for the means and the difference."""
    dataset(pytester, order=range(4))
    collect(pytester, "base/r.jsonl", [1.0, 1.0, None, None])
    collect(pytester, "cand/r.jsonl", [None, None, 1.0, 0.0])
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--json", "cmp.json")
    assert code == 0, err
    assert "default: no task scored in both runs" in out
    [group] = strict_json((pytester.path / "cmp.json").read_text())["groups"]
    assert group["num_tasks"] == 0 and group["num_tasks_unscored"] == 4
    assert group["difference/reward"] is None and group["baseline_mean/reward"] is None
    assert group["no_difference"] == "no task scored in both runs"
    assert group["manski_bounds/difference"] == [-0.75, 0.25]


def test_rewards_outside_the_range_leave_the_difference_without_manski_bounds(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's own summary said there were no bounds, but compare printed some: [+0.5000, +0.7500]
    for a difference of +1.0000, scored at 0 and 1 around rewards of 2 to 5."""
    dataset(pytester, order=range(4))
    collect(pytester, "base/r.jsonl", [0.0, 2.0, 1.0, 3.0])
    with ScriptedAgent(by_row([1.0, 2.0, None, 5.0])) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retries=0",
            "--rollouts-baseline=base/r.jsonl", out="cand/r.jsonl",
        )  # fmt: skip
    assert result.ret == 0, result.outlines[-20:]
    result.stdout.fnmatch_lines(
        [
            "default: no Manski bounds: rewards from 1 to 5 fall outside the reward range 0,1 (--rollouts-reward-*)",
            "default: vs baseline *; no Manski bounds: rewards from 0 to 5 fall outside the reward range 0,1 (1 *",
        ]
    )
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--json", "cmp.json")
    assert code == 0, err
    assert "Manski bounds of the difference" not in out
    assert (
        "default: baseline 1.6667, candidate 2.6667; no Manski bounds: rewards from 0 to 5 fall outside the reward "
        "range 0,1 (--reward-range); 1 paired tasks unscored in a run"
    ) in out
    [group] = strict_json((pytester.path / "cmp.json").read_text())["groups"]
    assert group["manski_bounds/difference"] is None and group["rewards_outside_range"] == [0.0, 5.0]
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--reward-range", "0,10")
    assert code == 0, err
    assert "Manski bounds of the difference [+0.5000, +3.0000] (unknown rollouts at 0,10)" in out


def test_the_gate_counts_rollouts_without_a_score_at_their_worst_unless_scored_only(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A candidate that failed 37 of 40 tasks passed --max-regression 0.05 (exit 0): only the 3 tasks
    both runs scored were compared."""
    dataset(pytester, order=range(40))
    collect(pytester, "base/r.jsonl", [1.0] * 40)
    collect(pytester, "cand/r.jsonl", [1.0] * 3 + [None] * 37)
    gated = ("compare", "base/r.jsonl", "cand/r.jsonl", "--max-regression", "0.05")
    code, out, err = cli(capsys, *gated, "--json", "c.json")
    assert code == 10, out + err
    # Each failed task at 0 against the baseline's 1 (nothing of the baseline's is unknown).
    worst = [0.0] * 3 + [-1.0] * 37
    low = stats.t.interval(0.95, 39, loc=sum(worst) / 40, scale=stats.sem(worst))[0]
    gate = (
        f"--max-regression 0.05: default: lower bound of candidate - baseline {low:+.4f} with every rollout without "
        "a score at its worst for the candidate (95% CI over 40 tasks; 37 of 40 paired tasks have rollouts without "
        "a score; --gate-scored-only judges the 3 tasks both runs scored)"
    )
    assert gate in out.splitlines()
    assert "EVAL FAILED: the candidate may be more than 0.05 worse than the baseline" in err
    [group] = strict_json((pytester.path / "c.json").read_text())["groups"]
    assert group["num_tasks_incomplete"] == 37
    assert group["pessimistic_ci_95/difference"][0] == pytest.approx(low)
    code, out, err = cli(capsys, *gated, "--gate-scored-only")
    assert code == 0, err
    assert "(difference +0.0000, 95% CI over 3 tasks; --gate-scored-only: 37 tasks lack scores)" in out
    code, _, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--gate-scored-only")
    assert code == 4 and "--gate-scored-only says how --max-regression judges: give it DELTA" in err


def test_rewards_near_the_float_limit_are_scored_compared_and_sized_without_a_traceback(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a black-box pass: a reward of 1e308 is finite, but two of them overflow a sum, and
    the run's scoring, compare and power ended in an OverflowError. So did power --delta 1e-300."""
    dataset(pytester, order=range(3))
    huge = ("--rollouts-repeats=2", "--rollouts-reward-range=-1e308,1e308")
    collect(pytester, "base/r.jsonl", [1e308, -1e308, 1e308], *huge)
    collect(pytester, "cand/r.jsonl", [1e308, 1e308, 1e308], *huge)
    code, _, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--reward-range=-1e308,1e308", "--json=j")
    assert code == 0, err
    [group] = strict_json((pytester.path / "j").read_text())["groups"]
    assert group["difference/reward"] == pytest.approx(1e308 - 1e308 / 3)
    assert group["ci_95/difference"] is None, "task 1's difference, 1e308 - -1e308, is past the float range"
    code, _, err = cli(capsys, "power", "base/r.jsonl")
    assert code == 4 and "default: the rewards' variance is too large for a float; nothing to size" in err
    dataset(pytester, order=range(12))
    collect(pytester, "small/r.jsonl", BASELINE)
    code, _, err = cli(capsys, "power", "small/r.jsonl", "--delta", "1e-300")
    assert code == 4 and "--delta 1e-300: default: detecting 1e-300 needs more tasks than a float can count" in err


def test_a_json_path_that_is_a_directory_is_refused_before_comparing_and_a_new_folder_made(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json DIR printed the whole comparison, then failed (exit 1); a missing folder failed too,
    where the report's -o makes it."""
    dataset(pytester)
    collect(pytester, "base/r.jsonl", BASELINE)
    collect(pytester, "cand/r.jsonl", BETTER)
    code, out, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--json", "base")
    assert (code, out) == (4, ""), err
    assert "--json: base is a directory; name the JSON file in it" in err
    code, _, err = cli(capsys, "compare", "base/r.jsonl", "cand/r.jsonl", "--json", "new/folder/c.json")
    assert code == 0, err
    assert json.loads((pytester.path / "new" / "folder" / "c.json").read_text())["groups"]
