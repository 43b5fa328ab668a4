"""Default metrics: pass@k, the statistics and their NeMo Gym names, checked against hand computations."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from fractions import Fraction

import pytest

from pytest_rollouts.scoring.metrics import MetricRow, compute_default_metrics, is_correct, numeric_fields, pass_at_k
from pytest_rollouts.store.jsonl import NonFinite

Z = 1.96


def metrics(table: list[tuple[int, int, dict[str, float]]], expected: dict[int, int]) -> dict:
    return compute_default_metrics([MetricRow(t, r, v) for t, r, v in table], expected=expected)


def rewards_table(rewards_by_task: dict[int, list[float]]) -> list[tuple[int, int, dict[str, float]]]:
    return [(t, r, {"reward": y}) for t, ys in rewards_by_task.items() for r, y in enumerate(ys)]


def test_pass_at_k_matches_enumeration_of_all_k_subsets() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                exact = Fraction(sum(any(s) for s in subsets), len(subsets))
                got = pass_at_k(n, c, k)
                if exact in (0, 1):
                    assert got == exact, (n, c, k)
                else:
                    assert got == pytest.approx(float(exact), rel=1e-12, abs=0), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (0, 0, 1), (3, 1, 0), (3, 4, 2), (3, -1, 2)])
def test_pass_at_k_rejects_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_only_full_reward_is_correct() -> None:
    assert is_correct(1.0) and is_correct(2.0)
    assert not is_correct(0.999) and not is_correct(0.0)


def test_summary_statistics_on_a_tiny_table() -> None:
    table = [
        (2, 0, {"reward": 0.5, "output_tokens": 60.0}),
        (0, 0, {"reward": 1.0, "output_tokens": 10.0}),
        (3, 0, {"reward": 1.0}),  # no output_tokens: absent, not zero
        (1, 0, {"reward": 0.0, "output_tokens": 20.0}),
    ]
    result = metrics(table, expected={0: 1, 1: 1, 2: 1, 3: 1})
    agent = result["agent_metrics"]
    assert agent["mean/reward"] == 0.625
    assert agent["median/reward"] == 0.75
    assert agent["std/reward"] == pytest.approx(math.sqrt(0.6875 / 4))  # population
    assert (agent["min/reward"], agent["max/reward"]) == (0.0, 1.0)
    assert agent["mean/output_tokens"] == 30.0
    assert agent["median/output_tokens"] == 20.0
    assert agent["std/output_tokens"] == pytest.approx(math.sqrt(1400 / 3))
    assert (agent["min/output_tokens"], agent["max/output_tokens"]) == (10.0, 60.0)
    assert "num_repeats" not in agent and "mean_across_repeats/mean/reward" not in agent
    assert agent["pass@1/reward"] == 0.5  # 0.5 is partial credit, not a pass
    assert "pass@2/reward" not in agent
    # With one rollout per task the clustered error is the plain stdev / sqrt(N).
    assert agent["sem_clustered/reward"] == pytest.approx(math.sqrt(0.6875 / 3) / 2)
    assert result["key_metrics"] == {
        "mean/reward": 0.625,
        "mean/output_tokens": 30.0,
        "sem_clustered/reward": agent["sem_clustered/reward"],
        "pass@1/reward": 0.5,
    }
    assert [g["_ng_task_index"] for g in result["group_level_metrics"]] == [0, 1, 2, 3]
    assert result["group_level_metrics"][1] == {
        "_ng_task_index": 1,
        **{f"{stat}/reward": 0.0 for stat in ("mean", "median", "std", "min", "max")},
        **{f"{stat}/output_tokens": 20.0 for stat in ("mean", "median", "min", "max")},
        "std/output_tokens": 0.0,
        "num_rollouts": 1,
        "expected_num_rollouts": 1,
        "missing_num_rollouts": 0,
        "reward_profile_completion_pct": 100.0,
        "rollout_infos": [
            {"rollout_id": "1:0", "_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 0.0, "output_tokens": 20.0}
        ],
        "sample": None,  # none given
    }
    assert "mean/output_tokens" not in result["group_level_metrics"][3]


def test_across_repeats_statistics_for_two_tasks_three_repeats() -> None:
    # task 0 rewards by repeat 1, 0, 1; task 1: 0, 0, 1 -> per-repeat means 0.5, 0.0, 1.0
    # tokens: task 0 10, 20, 30; task 1 30, 40, 50 -> per-repeat means 20, 30, 40
    table = [
        (t, r, {"reward": y, "output_tokens": tokens})
        for t, ys, ts in [(0, [1.0, 0.0, 1.0], [10.0, 20.0, 30.0]), (1, [0.0, 0.0, 1.0], [30.0, 40.0, 50.0])]
        for r, (y, tokens) in enumerate(zip(ys, ts, strict=True))
    ]
    random.Random(0).shuffle(table)
    result = metrics(table, expected={0: 3, 1: 3})
    agent = result["agent_metrics"]
    assert agent["num_repeats"] == 3 and isinstance(agent["num_repeats"], int)
    se = 0.5 / math.sqrt(3)  # sample std of (0.5, 0, 1) is 0.5
    assert agent["mean_across_repeats/mean/reward"] == 0.5
    assert agent["median_across_repeats/mean/reward"] == 0.5
    assert agent["std_across_repeats/mean/reward"] == pytest.approx(0.5)
    assert agent["min_across_repeats/mean/reward"] == 0.0
    assert agent["max_across_repeats/mean/reward"] == 1.0
    assert agent["se_across_repeats/mean/reward"] == pytest.approx(se)
    assert agent["ci_low_95_across_repeats/mean/reward"] == pytest.approx(0.5 - Z * se)
    assert agent["ci_high_95_across_repeats/mean/reward"] == pytest.approx(0.5 + Z * se)
    assert agent["mean_across_repeats/mean/output_tokens"] == 30.0
    assert agent["std_across_repeats/mean/output_tokens"] == pytest.approx(10.0)
    assert agent["se_across_repeats/mean/output_tokens"] == pytest.approx(10 / math.sqrt(3))
    # mu = 0.5; cluster residual sums +0.5 and -0.5; V = 2/1 * 0.5 / 6^2
    assert agent["sem_clustered/reward"] == pytest.approx(1 / 6)

    first = result["repeat_level_metrics"][0]
    assert [r["_ng_rollout_index"] for r in result["repeat_level_metrics"]] == [0, 1, 2]
    assert (first["sample_count"], first["missing_count"]) == (2, 0)
    assert (first["mean/reward"], first["median/reward"], first["std/reward"]) == (0.5, 0.5, 0.5)
    assert first["sem/reward"] == pytest.approx(0.5)  # stdev(1, 0) / sqrt(2)
    assert (first["p25/reward"], first["p75/reward"]) == (0.25, 0.75)
    assert first["ci_low_95/reward"] == pytest.approx(0.5 - Z * 0.5)
    assert first["ci_high_95/reward"] == pytest.approx(0.5 + Z * 0.5)

    task0 = result["group_level_metrics"][0]
    assert task0["mean/reward"] == pytest.approx(2 / 3)
    assert task0["std/reward"] == pytest.approx(math.sqrt(2 / 9))
    assert (task0["num_rollouts"], task0["missing_num_rollouts"]) == (3, 0)


def test_clustered_standard_error_with_unequal_clusters() -> None:
    agent = metrics(rewards_table({0: [1, 1, 1, 1], 1: [0, 0], 2: [1, 0]}), expected={0: 4, 1: 4, 2: 4})
    # N = 8, mu = 5/8; residual sums 4*3/8 = 1.5, 2*(-5/8) = -1.25, 3/8 - 5/8 = -0.25
    sum_sq = 1.5**2 + 1.25**2 + 0.25**2
    assert agent["agent_metrics"]["sem_clustered/reward"] == pytest.approx(math.sqrt(3 / 2 * sum_sq / 8**2))
    one_task = metrics(rewards_table({0: [1, 0, 1]}), expected={0: 3})
    assert one_task["agent_metrics"]["sem_clustered/reward"] is None


def test_pass_at_k_excludes_and_counts_tasks_with_too_few_scored_rollouts() -> None:
    table = [
        *rewards_table({0: [1, 0, 0, 0], 1: [1, 1], 2: [0]}),
        (2, 1, {"output_tokens": 5.0}),  # present but unscored
    ]  # task 3: nothing at all
    result = metrics(table, expected={0: 4, 1: 4, 2: 4, 3: 4})
    agent = result["agent_metrics"]
    assert agent["pass@1/reward"] == pytest.approx((0.25 + 1 + 0) / 3)
    assert (agent["pass@1/num_tasks"], agent["pass@1/num_tasks_excluded"]) == (3, 1)
    assert agent["pass@2/reward"] == pytest.approx((1 - 3 / 6 + 1) / 2)  # 1 - C(3,2)/C(4,2) for task 0
    assert (agent["pass@2/num_tasks"], agent["pass@2/num_tasks_excluded"]) == (2, 2)
    assert agent["pass@4/reward"] == 1.0
    assert (agent["pass@4/num_tasks"], agent["pass@4/num_tasks_excluded"]) == (1, 3)
    assert not any(name.startswith("pass@8") for name in agent)
    assert {name for name in result["key_metrics"] if name.startswith("pass@")} == {
        "pass@1/reward",
        "pass@2/reward",
        "pass@4/reward",
    }
    groups = {g["_ng_task_index"]: g for g in result["group_level_metrics"]}
    assert (groups[2]["num_rollouts"], groups[2]["missing_num_rollouts"]) == (2, 2)
    assert groups[2]["reward_profile_completion_pct"] == 50.0
    assert (groups[3]["num_rollouts"], groups[3]["reward_profile_completion_pct"]) == (0, 0.0)
    last = result["repeat_level_metrics"][3]
    assert (last["_ng_rollout_index"], last["sample_count"], last["missing_count"]) == (3, 1, 3)
    assert last["sem/reward"] is None and last["p25/reward"] == last["p75/reward"] == 0.0


def test_std_agrees_with_the_statistics_module() -> None:
    rng = random.Random(1)
    table = [(t, r, {"x": rng.uniform(-1e6, 1e6)}) for t in range(50) for r in range(3)]
    agent = metrics(table, expected=dict.fromkeys(range(50), 3))["agent_metrics"]
    xs = [v["x"] for _, _, v in table]
    assert agent["std/x"] == pytest.approx(statistics.pstdev(xs), rel=1e-12)
    repeat_means = [statistics.fmean(v["x"] for _, r, v in table if r == rollout) for rollout in range(3)]
    assert agent["std_across_repeats/mean/x"] == pytest.approx(statistics.stdev(repeat_means), rel=1e-12)


def test_numeric_fields_keeps_measurements_only() -> None:
    row = {
        "reward": 1,
        "correct": True,
        "judged_wrong": False,
        "extracted_answer": "42",
        "failure_reason": None,
        "verifier": {"score": 3},
        "scores": [1, 2],
        "nan": float("nan"),
        "inf": float("-inf"),
        "_ng_task_index": 3,
        "_ng_rollout_index": 1,
        "_ng_attempt_index": 0,
        "mask_sample": False,
        "elapsed_seconds": 1.5,
        "total_tokens": 99,
        "response": {
            "id": "resp_1",
            "output": [{"type": "message", "tokens": 5}],
            "usage": {
                "input_tokens": 24,
                "input_tokens_details": {"cached_tokens": 8},
                "output_tokens": 7,
                "output_tokens_details": {"reasoning_tokens": 3, "audio": {"audio_tokens": 2}},
                "total_tokens": 31,
                "model": "x",
            },
        },
    }
    fields = numeric_fields(row)
    assert fields == {
        "reward": 1.0,
        "correct": 1.0,
        "judged_wrong": 0.0,
        "total_tokens": 99.0,  # the top-level field wins over the usage leaf
        "input_tokens": 24.0,
        "cached_tokens": 8.0,
        "output_tokens": 7.0,
        "reasoning_tokens": 3.0,
        "audio_tokens": 2.0,
        "inf": float("-inf"),  # a value, as to NeMo Gym's pandas; NaN is a missing one
    }
    assert all(type(v) is float for k, v in fields.items() if k != "inf")
    assert type(fields["inf"]) is NonFinite, "written back as -Infinity, not as orjson's null"
    assert numeric_fields({"reward": 0.5, "response": None}) == {"reward": 0.5}
    assert numeric_fields({"response": {"usage": None}}) == {}


def test_no_rows_still_lists_every_expected_task() -> None:
    result = compute_default_metrics([], expected={1: 2, 0: 2})
    assert {**result, "group_level_metrics": list(result["group_level_metrics"])} == {
        "agent_metrics": {},
        "key_metrics": {},
        "group_level_metrics": [
            {
                "_ng_task_index": t,
                "num_rollouts": 0,
                "expected_num_rollouts": 2,
                "missing_num_rollouts": 2,
                "reward_profile_completion_pct": 0.0,
                "rollout_infos": [],
                "sample": None,
            }
            for t in (0, 1)
        ],
        "repeat_level_metrics": [],
    }


def test_result_is_strict_json_with_none_for_undefined_values() -> None:
    table = [(0, 0, {"reward": 1.0, "input_tokens": 3.0}), (0, 1, {"reward": 0.0})]
    result = metrics(table, expected={0: 2, 1: 2})
    assert result["agent_metrics"]["sem_clustered/reward"] is None  # one task with rows
    assert result["agent_metrics"]["std_across_repeats/mean/input_tokens"] is None  # one repeat has it
    assert result["repeat_level_metrics"][0]["ci_low_95/reward"] is None  # one sample
    assert result["group_level_metrics"][1]["num_rollouts"] == 0
    held = {**result, "group_level_metrics": list(result["group_level_metrics"])}
    assert json.loads(json.dumps(held, allow_nan=False)) == held


def test_row_order_does_not_matter() -> None:
    table = rewards_table({0: [1, 0, 1], 1: [0, 0.5, 1], 2: [1, 1]})
    shuffled = list(table)
    random.Random(2).shuffle(shuffled)
    expected = dict.fromkeys(range(3), 3)
    assert metrics(shuffled, expected) == metrics(table, expected)


def test_group_entries_list_their_rollouts_by_index_and_sample_the_task() -> None:
    """NeMo Gym's ``rollout_infos`` and ``sample`` in each task's entry. A rollout keeps its own index
    there, the key to its full row, even where its repeat differs (a fanned-out agent's rollouts
    2 and 3 are its repeats 0 and 1): the per-repeat statistics still go by the repeat."""
    rows = [
        MetricRow(0, 3, {"reward": 0.0}, repeat=1),
        MetricRow(0, 2, {"reward": 1.0, "output_tokens": 7.0}, repeat=0),
        MetricRow(1, 2, {"reward": 1.0}, repeat=0),
    ]
    asked: list[int] = []

    def sample(task: int) -> dict[str, str] | None:
        asked.append(task)
        return {"question": f"q{task}"} if task < 2 else None

    result = compute_default_metrics(rows, expected={0: 2, 1: 2, 2: 2}, sample=sample)
    assert asked == [], "a sample is read only when its task's entry is built"
    task0, task1, task2 = result["group_level_metrics"]
    assert task0["rollout_infos"] == [
        {"rollout_id": "0:2", "_ng_task_index": 0, "_ng_rollout_index": 2, "reward": 1.0, "output_tokens": 7.0},
        {"rollout_id": "0:3", "_ng_task_index": 0, "_ng_rollout_index": 3, "reward": 0.0},
    ]
    assert [info["rollout_id"] for info in task1["rollout_infos"]] == ["1:2"]
    assert (task2["rollout_infos"], task2["sample"]) == ([], None)
    assert (task0["sample"], task1["sample"]) == ({"question": "q0"}, {"question": "q1"})
    assert asked == [0, 1, 2]
    repeats = result["repeat_level_metrics"]
    assert [(r["_ng_rollout_index"], r["sample_count"], r["mean/reward"]) for r in repeats] == [
        (0, 2, 1.0),
        (1, 1, 0.0),
    ]
