"""Small-sample intervals of a pass rate keep their coverage: checked against scipy and by simulation.

Coverage is the share of seeded simulated evals whose interval holds the true pass rate; the check
is that it is never more than one point below the nominal 95% (an exact interval is conservative:
it may be above). The simulation sizes keep a 1-point shortfall several standard errors from
chance: 20,000 draws per rate for the exact interval (se 0.15 points), 1,000 clustered evals per
setting (se 0.6 points; their coverage is 96.7-99.7%, so 94% is 4.5-15 se below it, while the
interval before its df was Satterthwaite's covered 87.7-93.9% in three of these corners).
"""

from __future__ import annotations

import bisect
import math
import random

import pytest
from scipy import stats

from pytest_rollouts.scoring.distributions import beta_ppf
from pytest_rollouts.scoring.intervals import mean_interval
from pytest_rollouts.scoring.small_sample import SMALL_SAMPLE_TASKS, clopper_pearson

NOMINAL = 0.95
SIZES = (20, 40, 100)
CLUSTERED_DRAWS = 1_000
RATES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.98)


def test_the_exact_interval_is_scipys_and_the_beta_quantile_too() -> None:
    for n in (1, 2, 7, 20, 40, 100):
        for x in range(n + 1):
            expected = stats.binomtest(x, n).proportion_ci(NOMINAL, "exact")
            assert clopper_pearson(x, n, NOMINAL) == pytest.approx((expected.low, expected.high), abs=1e-10)
    for a, b in ((0.5, 0.5), (3.2, 150.7), (0.1, 5.0), (400.0, 2.0), (17.3, 22.9)):
        for q in (0.001, 0.025, 0.5, 0.975, 0.999):
            assert beta_ppf(q, a, b) == pytest.approx(stats.beta.ppf(q, a, b), abs=1e-10)


def _binomial_draws(rng: random.Random, n: int, p: float, draws: int) -> list[int]:
    """Binomial draws by inverting the CDF (exact pmf by ``math.comb``): one uniform per draw."""
    cdf, total = [], 0.0
    for x in range(n + 1):
        total += math.comb(n, x) * p**x * (1 - p) ** (n - x)
        cdf.append(total)
    return [min(n, bisect.bisect_left(cdf, rng.random() * total)) for _ in range(draws)]


def _coverage(n: int, p: float, interval, rng: random.Random, draws: int = 20_000) -> float:
    intervals = [interval(x, n) for x in range(n + 1)]  # n + 1 outcomes: each interval once
    return sum(intervals[x][0] <= p <= intervals[x][1] for x in _binomial_draws(rng, n, p, draws)) / draws


def _chosen(x: int, n: int) -> tuple[float, float]:
    """The interval a run of n one-rollout tasks with x passes reports."""
    found = mean_interval([[1.0]] * x + [[0.0]] * (n - x))
    assert found is not None and found.method == "exact"
    return found.low, found.high


def _normal(x: int, n: int) -> tuple[float, float]:
    p = x / n
    half = 1.96 * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


@pytest.mark.parametrize("n", SIZES)
def test_one_rollout_per_task_the_chosen_interval_covers_at_least_94_percent_at_every_rate(n: int) -> None:
    rng = random.Random(n)
    coverage = {p: _coverage(n, p, _chosen, rng) for p in RATES}
    assert min(coverage.values()) >= NOMINAL - 0.01, coverage
    # The check has teeth: the normal approximation on the same draws falls well short of it.
    normal = {p: _coverage(n, p, _normal, random.Random(n)) for p in RATES}
    assert min(normal.values()) < NOMINAL - 0.02, normal


def _clustered_eval(rng: random.Random, tasks: int, mean: float, icc: float, repeats: int) -> list[list[float]]:
    """A beta-binomial eval: each task's own pass rate from a Beta of this mean and intra-task
    correlation, then ``repeats`` rollouts of it."""
    a, b = mean * (1 / icc - 1), (1 - mean) * (1 / icc - 1)
    out = []
    for _ in range(tasks):
        rate = rng.betavariate(a, b)
        out.append([1.0 if rng.random() < rate else 0.0 for _ in range(repeats)])
    return out


# (mean, intra-task correlation, tasks, repeats): the corners where a few passing tasks carry all
# the variance (Korn and Graubard's df = G - 1 covered 85-93% there), their mirror images, and the
# middle of the grid. docs/statistics.md has the whole grid (6 means x 3 correlations x 3 sizes x 2).
CLUSTERED = (
    (0.05, 0.3, 40, 4),
    (0.1, 0.5, 20, 4),
    (0.05, 0.5, 20, 16),
    (0.95, 0.5, 40, 16),
    (0.95, 0.3, 20, 16),
    (0.3, 0.3, 100, 4),
)


@pytest.mark.parametrize(("mean", "icc", "tasks", "repeats"), CLUSTERED)
def test_with_repeats_the_clustered_exact_interval_covers_at_least_94_percent(
    mean: float, icc: float, tasks: int, repeats: int
) -> None:
    rng = random.Random(f"{mean} {icc} {tasks} {repeats}")
    hits = 0
    for _ in range(CLUSTERED_DRAWS):
        found = mean_interval(_clustered_eval(rng, tasks, mean, icc, repeats))
        assert found is not None and found.method == "exact-clustered"
        hits += found.low <= mean <= found.high
    assert hits / CLUSTERED_DRAWS >= NOMINAL - 0.01, hits / CLUSTERED_DRAWS


def test_with_repeats_that_barely_agree_the_interval_is_far_narrower_than_one_on_task_means() -> None:
    """Not safe by being wide: where repeats are nearly independent the effective size is near N."""
    rng = random.Random(7)
    widths = [mean_interval(_clustered_eval(rng, 100, 0.5, 0.1, 16)) for _ in range(50)]
    on_tasks = clopper_pearson(50, 100, NOMINAL)
    assert sum(w.high - w.low for w in widths) / 50 < 0.5 * (on_tasks[1] - on_tasks[0])


def test_the_clustered_interval_is_wider_than_one_that_takes_repeats_as_independent() -> None:
    """Repeats that agree within a task (an easy task passes every time) carry less than new tasks."""
    rewards = [[1.0] * 4] * 12 + [[0.0] * 4] * 8
    clustered = mean_interval(rewards)
    independent = clopper_pearson(48, 80, NOMINAL)
    assert clustered is not None and clustered.low < independent[0] and clustered.high > independent[1]


def test_at_the_documented_size_the_large_sample_intervals_take_over() -> None:
    many = [[1.0]] * 150 + [[0.0]] * (SMALL_SAMPLE_TASKS - 150)
    assert mean_interval(many).method == "wilson"
    assert mean_interval(many[1:]).method == "exact"
    assert mean_interval([[1.0, 0.0]] * SMALL_SAMPLE_TASKS).method == "t"
