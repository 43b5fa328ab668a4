"""Every statistic of issue 20 against scipy/numpy on fixed data (the package itself imports neither)."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest
from scipy import special, stats

from pytest_rollouts.scoring.columns import RolloutColumns
from pytest_rollouts.scoring.distributions import beta_inc, binomial_two_sided_half, t_cdf, t_ppf
from pytest_rollouts.scoring.intervals import RewardRange, manski_bounds, mean_interval, t_interval, wilson
from pytest_rollouts.scoring.metrics import pass_at_k, pass_hat_k
from pytest_rollouts.scoring.paired import TaskRewards, compare
from pytest_rollouts.scoring.power import Variance, minimum_detectable, tasks_needed, variance_components
from pytest_rollouts.scoring.run_statistics import statistics_entry
from pytest_rollouts.scoring.stats import Flattened, nan_mean


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 19, 59, 250, 5000])
def test_t_quantiles_and_cdf_match_scipy(df: int) -> None:
    for q in (0.001, 0.025, 0.05, 0.3, 0.5, 0.8, 0.9, 0.975, 0.995, 0.9995):
        assert t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9, abs=1e-12)
    for t in (-40.0, -3.2, -1.0, 0.0, 0.4, 2.1, 12.0):
        assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), rel=1e-9, abs=1e-15)


def test_incomplete_beta_matches_scipy() -> None:
    for a, b, x in [(0.5, 0.5, 0.3), (2, 3, 0.9), (30, 0.5, 0.99), (0.7, 12, 0.01), (100, 100, 0.5)]:
        assert beta_inc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-10)


@pytest.mark.parametrize("n", [1, 2, 9, 30, 101, 2500])
def test_mcnemar_exact_p_value_is_scipys_binomtest(n: int) -> None:
    for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        assert binomial_two_sided_half(k, n) == pytest.approx(stats.binomtest(k, n, 0.5).pvalue, rel=1e-12)
    assert binomial_two_sided_half(0, 0) == 1.0


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (1, 1), (47, 120), (119, 120)])
def test_wilson_interval_is_the_score_formula(k: int, n: int) -> None:
    z = stats.norm.ppf(0.975)
    p = k / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    interval = wilson(k, n)
    assert (interval.low, interval.high) == pytest.approx((max(0, centre - half), min(1, centre + half)), abs=1e-12)
    assert 0.0 <= interval.low <= p <= interval.high <= 1.0


def test_t_interval_is_scipys() -> None:
    assert t_interval(0.4, 0.05, 11).as_list() == pytest.approx(list(stats.t.interval(0.95, 11, loc=0.4, scale=0.05)))


def test_mean_interval_exact_for_few_binary_tasks_else_t_on_clustered_se() -> None:
    binary = [[1.0], [0.0], [1.0], [1.0], [0.0], [1.0]]
    interval = mean_interval(binary)
    assert interval is not None and interval.method == "exact"
    exact = stats.binomtest(4, 6).proportion_ci(0.95, "exact")
    assert interval.as_list() == pytest.approx([exact.low, exact.high])
    repeats = [[1.0, 0.5, 1.0], [0.0, 0.0], [0.25, 1.0, 0.75], [0.5]]
    flat = np.concatenate([np.array(ys) for ys in repeats])
    g, mean = len(repeats), flat.mean()
    se = np.sqrt(g / (g - 1) * sum(np.sum(np.array(ys) - mean) ** 2 for ys in repeats)) / flat.size
    interval = mean_interval(repeats)
    assert interval is not None and interval.method == "t"
    assert interval.as_list() == pytest.approx(list(stats.t.interval(0.95, g - 1, loc=mean, scale=se)))
    assert mean_interval([[1.0, 0.0]]) is None, "one task: no spread between tasks"


def test_manski_bounds_fill_the_unknown_at_floor_and_ceiling() -> None:
    scored = np.array([1.0, 0.0, 0.5, 1.0])
    low, high = manski_bounds(float(scored.mean()), 4, 3, RewardRange(-1.0, 2.0))
    assert low == pytest.approx(np.mean(np.concatenate([scored, [-1.0] * 3])))
    assert high == pytest.approx(np.mean(np.concatenate([scored, [2.0] * 3])))
    with pytest.raises(ValueError, match="LO < HI"):
        RewardRange(1.0, 1.0)


@pytest.mark.parametrize(("n", "c"), [(10, 0), (10, 3), (10, 10), (5, 4), (50, 17)])
def test_pass_at_k_and_pass_hat_k_are_the_binomial_ratios(n: int, c: int) -> None:
    for k in range(1, n + 1):
        assert pass_at_k(n, c, k) == pytest.approx(1 - special.comb(n - c, k) / special.comb(n, k), abs=1e-12)
        assert pass_hat_k(n, c, k) == pytest.approx(special.comb(c, k) / special.comb(n, k), abs=1e-12)


def _tasks(values: list[list[float]], expected: int | None = None) -> list[TaskRewards]:
    return [TaskRewards(str(i), tuple(ys), expected or len(ys)) for i, ys in enumerate(values)]


def test_paired_difference_se_and_interval_match_scipy_ttest_rel() -> None:
    rng = np.random.default_rng(7)
    base = rng.uniform(0, 1, size=(25, 3))
    cand = np.clip(base + rng.normal(0.05, 0.2, size=(25, 3)), 0, 1)
    result = compare("a", list(zip(_tasks(base.tolist()), _tasks(cand.tolist()), strict=True)))
    d = cand.mean(axis=1) - base.mean(axis=1)
    assert result.difference == pytest.approx(d.mean())
    assert result.se == pytest.approx(stats.sem(d))
    assert result.interval is not None
    assert result.interval.as_list() == pytest.approx(
        list(stats.t.interval(0.95, 24, loc=d.mean(), scale=stats.sem(d)))
    )
    # The bootstrap's p-value is, to within resampling noise, the normal test's on the plug-in
    # (ddof=0) spread that its resamples have; a little below the paired t test's.
    assert result.test is not None and result.test.method == "bootstrap"
    plug_in = 2 * stats.norm.sf(abs(d.mean()) / (d.std(ddof=0) / np.sqrt(d.size)))
    assert result.test.p_value == pytest.approx(plug_in, abs=0.02)
    assert result.test.p_value < stats.ttest_rel(cand.mean(axis=1), base.mean(axis=1)).pvalue
    reference = stats.bootstrap((d,), np.mean, method="percentile", n_resamples=4000, random_state=1)
    assert result.test.interval is not None
    low, high = result.test.interval.as_list()
    assert low == pytest.approx(reference.confidence_interval.low, abs=0.01)
    assert high == pytest.approx(reference.confidence_interval.high, abs=0.01)


def test_binary_rewards_get_mcnemars_exact_test_and_the_flips_largest_first() -> None:
    base = [[1.0], [0.0], [0.0], [1.0], [1.0], [0.0], [0.0], [1.0], [0.0], [0.0]]
    cand = [[1.0], [1.0], [1.0], [0.0], [1.0], [1.0], [0.0], [1.0], [1.0], [0.0]]
    result = compare("a", list(zip(_tasks(base), _tasks(cand), strict=True)))
    assert result.test is not None and result.test.method == "mcnemar"
    assert result.test.discordant == (4, 1)
    assert result.test.p_value == pytest.approx(stats.binomtest(4, 5, 0.5).pvalue)
    assert [f.label for f in result.flips] == ["1", "2", "3", "5", "8"]
    assert [f.difference for f in result.flips] == [1.0, 1.0, -1.0, 1.0, 1.0]
    assert result.difference == pytest.approx(0.3)


def test_the_flips_are_ordered_by_effect_size() -> None:
    base = _tasks([[0.5], [0.5], [0.5]])
    cand = _tasks([[0.6], [0.0], [0.9]])
    result = compare("a", list(zip(base, cand, strict=True)))
    assert [(f.label, round(f.difference, 2)) for f in result.flips] == [("1", -0.5), ("2", 0.4), ("0", 0.1)]


def test_manski_bounds_of_the_difference_and_unscored_tasks() -> None:
    # Task 1 of the candidate never scored; task 0 of the baseline lost one of its two rollouts.
    base = [TaskRewards("0", (1.0,), 2), TaskRewards("1", (0.0, 1.0), 2), TaskRewards("2", (0.0, 0.0), 2)]
    cand = [TaskRewards("0", (1.0, 1.0), 2), TaskRewards("1", (), 2), TaskRewards("2", (1.0, 0.0), 2)]
    result = compare("a", list(zip(base, cand, strict=True)))
    assert (result.tasks, result.unscored) == (2, 1)
    base_low = np.mean([np.mean([1, 0]), np.mean([0, 1]), 0.0])
    base_high = np.mean([1.0, np.mean([0, 1]), 0.0])
    cand_low = np.mean([1.0, 0.0, 0.5])
    cand_high = np.mean([1.0, 1.0, 0.5])
    assert result.manski == pytest.approx((cand_low - base_high, cand_high - base_low))


def test_a_seeded_bootstrap_gives_the_same_numbers_twice() -> None:
    base = _tasks([[0.1], [0.4], [0.3], [0.9]])
    cand = _tasks([[0.2], [0.6], [0.3], [0.7]])
    assert compare("a", list(zip(base, cand, strict=True))) == compare("a", list(zip(base, cand, strict=True)))


def test_the_paired_interval_covers_the_true_difference_about_95_percent_of_the_time() -> None:
    """400 simulated paired evals (30 tasks, 2 repeats, tasks of random difficulty, a true effect of
    0.05): the t interval must contain 0.05 in 92% to 98% of them. Seeded, so deterministic."""
    rng = random.Random(2024)
    covered = 0
    for _ in range(400):
        pairs = []
        for i in range(30):
            p = rng.random() * 0.9
            base = tuple(float(rng.random() < p) for _ in range(2))
            cand = tuple(float(rng.random() < p + 0.05) for _ in range(2))
            pairs.append((TaskRewards(str(i), base, 2), TaskRewards(str(i), cand, 2)))
        interval = compare("a", pairs).interval
        assert interval is not None
        covered += interval.low <= 0.05 <= interval.high
    assert 0.92 <= covered / 400 <= 0.98


def test_variance_components_and_power_match_numpy_and_the_normal_formula() -> None:
    rewards = [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.5, 1.0, 0.0], [0.25, 0.75, 0.5]]
    array = np.array(rewards)
    within = array.var(axis=1, ddof=1).mean()  # equal repeats: the pooled variance is their mean
    between = max(0.0, array.mean(axis=1).var(ddof=1) - within / 3)
    variance = variance_components(rewards)
    assert (variance.within, variance.between) == pytest.approx((within, between))
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    var_d = 2 * 0.5 * between + 2 * within / 3
    assert minimum_detectable(variance) == pytest.approx(z * np.sqrt(var_d / 5))
    assert minimum_detectable(variance, tasks=500, repeats=8) == pytest.approx(
        z * np.sqrt((between + 2 * within / 8) / 500)
    )
    n = tasks_needed(variance, 0.05, repeats=3)
    assert n == math.ceil((z / 0.05) ** 2 * var_d)
    assert (
        minimum_detectable(variance, tasks=n, repeats=3) <= 0.05 < minimum_detectable(variance, tasks=n - 1, repeats=3)
    )


def _simulated_power(tasks: int, repeats: int, delta: float, between: float, within: float, rho: float) -> float:
    """The share of seeded simulated paired runs whose 95% t interval of candidate - baseline excludes 0,
    when the candidate is better by ``delta`` on tasks whose true scores correlate ``rho`` across the runs."""
    rng = np.random.default_rng(7)
    replicates = 2000
    base_true = rng.normal(0.5, between**0.5, (replicates, tasks))
    fresh = rng.normal(0.0, between**0.5, (replicates, tasks))
    cand_true = 0.5 + rho * (base_true - 0.5) + (1 - rho**2) ** 0.5 * fresh + delta
    base = rng.normal(base_true[..., None], within**0.5, (replicates, tasks, repeats)).mean(axis=2)
    cand = rng.normal(cand_true[..., None], within**0.5, (replicates, tasks, repeats)).mean(axis=2)
    diffs = cand - base
    means, ses = diffs.mean(axis=1), diffs.std(axis=1, ddof=1) / tasks**0.5
    critical = t_interval(0.0, 1.0, tasks - 1).high  # the interval is mean +- critical x se
    return float(np.mean(np.abs(means) > critical * ses))


def test_the_minimum_detectable_difference_is_detected_80_percent_of_the_time_in_simulation() -> None:
    """The power formula, checked by what it promises: paired runs differing by exactly the minimum
    detectable difference (or sized by tasks_needed) are told apart by the paired interval the gate
    uses about 80% of the time (the t test at 60 tasks a little less than the normal formula's 80%)."""
    truth = Variance(tasks=60, repeats=4, between=0.04, within=0.09)
    delta = minimum_detectable(truth, correlation=0.5)
    assert 0.75 <= _simulated_power(60, 4, delta, 0.04, 0.09, 0.5) <= 0.85
    needed = tasks_needed(truth, 0.1, repeats=2, correlation=0.5)
    assert 0.75 <= _simulated_power(needed, 2, 0.1, 0.04, 0.09, 0.5) <= 0.85
    assert _simulated_power(needed // 2, 2, 0.1, 0.04, 0.09, 0.5) < 0.7, "half the tasks: visibly less power"

    # And the components a run measures are the true ones (400 tasks x 4 repeats, seeded).
    rng = np.random.default_rng(11)
    run = rng.normal(rng.normal(0.5, 0.2, 400)[:, None], 0.3, (400, 4))
    measured = variance_components(run.tolist())
    assert measured.between == pytest.approx(0.04, rel=0.2)
    assert measured.within == pytest.approx(0.09, rel=0.1)


def test_power_with_one_rollout_per_task_puts_all_the_spread_between_tasks() -> None:
    variance = variance_components([[1.0], [0.0], [1.0], [1.0]])
    assert variance.within is None
    assert variance.between == pytest.approx(np.var([1, 0, 1, 1], ddof=1))
    with pytest.raises(ValueError, match="two tasks"):
        variance_components([[1.0, 0.0]])


def test_an_infinite_reward_leaves_no_interval_nor_bounds() -> None:
    entry = statistics_entry({0: [1.0, math.inf], 1: [0.0]}, {1: 1}, RewardRange())
    assert (entry["ci_95/reward"], entry["manski_bounds/reward"]) == (None, None)
    assert entry["mean/reward"] == math.inf
    entry = statistics_entry({0: [math.inf], 1: [-math.inf]}, {}, RewardRange())
    assert entry["mean/reward"] is None, "infinities of both signs: no mean"


def test_a_task_with_every_rollout_masked_is_bounded_by_the_whole_range() -> None:
    assert TaskRewards("0", (), 0).bounds(RewardRange(-1.0, 2.0)) == (-1.0, 2.0)


def test_a_runs_rewards_are_read_task_by_task_never_copied_into_one_list() -> None:
    """At a million rollouts each flat copy of the rewards is 8 MB more: the extremes are taken per
    task, and the mean reads the tasks in place, its overflow fallback (a second reading) too."""
    groups = [[0.5, 1.5], [], [-0.5]]
    assert RewardRange().outside(groups) == (-0.5, 1.5)
    assert RewardRange(-1.0, 2.0).outside(groups) is None
    huge = Flattened([[1e308, 1e308], [1e308]])
    assert nan_mean(huge) == pytest.approx(1e308) and len(huge) == 3 and 1e308 in huge


def test_a_tasks_manski_bounds_weigh_its_scored_mean_against_the_unknown_rollouts() -> None:
    task = TaskRewards("t", (1.0, 0.5), expected=4)
    assert task.bounds(RewardRange()) == pytest.approx((0.375, 0.875))
    assert TaskRewards("t", (), expected=2).bounds(RewardRange(-1.0, 2.0)) == (-1.0, 2.0)
    assert TaskRewards("t", (1e308, 1e308), expected=2).bounds(RewardRange()) == (1e308, 1e308)


@pytest.mark.parametrize("x", [-0.0, 0.0, 0.25, -5e-324, 1e308, math.inf, -math.inf, 3, True])
def test_the_mean_of_one_value_is_fmeans_minus_zero_made_zero(x: float) -> None:
    """A task of one rollout takes a short way to its mean: it must give what ``fmean`` gives,
    ``-0.0`` made ``0.0`` and an int a float, or a metrics file would change by a sign."""
    expected = statistics.fmean([x])
    assert repr(nan_mean([x])) == repr(expected) and type(nan_mean(Flattened([[x]]))) is float


def test_each_tasks_values_in_one_pass_are_those_of_its_own_slice() -> None:
    """``field_by_task`` (one pass for the rewards of every task) against ``field`` over each task's
    slice: missing values left out, a task without any left out, an infinity kept as a ``NonFinite``."""
    rows = [(0, 0, {"reward": 1.0}), (0, 1, {}), (1, 0, {"reward": -0.0}), (2, 0, {}), (3, 1, {"reward": math.inf})]
    rows += [(3, 0, {"reward": 0.5}), (4, 0, {"reward": math.nan})]
    columns = RolloutColumns.of_rows((task, rollout, values, None) for task, rollout, values in rows)
    by_slice = {part.task: columns.field("reward", range(part.start, part.stop)) for part in columns.by_task()}
    expected = {task: values for task, values in by_slice.items() if values}
    found = columns.field_by_task("reward")
    assert list(found) == list(expected) == [0, 1, 3]
    assert {t: [repr(x) for x in v] for t, v in found.items()} == {t: [repr(x) for x in v] for t, v in expected.items()}
    assert [type(v) for v in found.values()] == [type(v) for v in expected.values()]
    assert columns.field_by_task("absent") == {}


def test_a_fields_values_leave_out_the_missing_and_keep_infinities_whatever_the_column_holds() -> None:
    """``field`` takes a column whole when one sum says nothing in it is missing or infinite: a NaN
    or an infinity among the values, or finite ones whose sum overflows, must still come out as the
    values in order, the missing left out and an infinity a ``NonFinite`` (in a list, not an array)."""
    rng = random.Random(7)
    pool = [0.0, -0.0, 1.0, -2.5, math.nan, math.inf, -math.inf, 1e308, -1e308]
    for _ in range(2000):
        n = rng.randint(0, 10)
        values = [rng.choice(pool) for _ in range(n)]
        columns = RolloutColumns.of_rows((task, 0, {"f": x}, None) for task, x in enumerate(values))
        rows = None if rng.random() < 0.5 else [rng.randrange(n) for _ in range(rng.randint(0, n))] if n else []
        picked = values if rows is None else [values[i] for i in rows]
        expected = [x for x in picked if x == x]
        found = columns.field("f", rows)
        assert [repr(x) for x in found] == [repr(x) for x in expected], (values, rows)
        assert isinstance(found, list) == any(math.isinf(x) for x in expected), (values, rows)
