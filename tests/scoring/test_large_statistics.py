"""A median, a spread and latency percentiles over more values than one run (``stats.RUN``) agree with the stdlib's."""

from __future__ import annotations

import math
import random
import statistics
from array import array

import pytest

from pytest_rollouts.scoring.perf import latency_summary
from pytest_rollouts.scoring.stats import RUN, median, std_dev


@pytest.mark.parametrize("n", [RUN, RUN + 1, 2 * RUN, 3 * RUN + 7])
def test_past_one_run_the_median_and_spread_are_the_stdlibs(n: int) -> None:
    rng = random.Random(n)
    values = array("d", (rng.random() * rng.choice([1.0, 1e6]) for _ in range(n)))
    assert median(values) == statistics.median(values)
    assert median(list(values[:-1])) == statistics.median(values[:-1])
    tokens = [float(rng.randrange(50)) for _ in range(n)]  # many ties, as token counts have
    assert median(tokens) == statistics.median(tokens)
    mean = statistics.fmean(values)
    assert math.isclose(std_dev(values, mean, ddof=0), statistics.pstdev(values), rel_tol=1e-12)
    assert math.isclose(std_dev(values, mean, ddof=1), statistics.stdev(values), rel_tol=1e-12)


def test_past_one_run_the_latency_percentiles_are_the_stdlibs() -> None:
    rng = random.Random(7)
    durations = array("d", (rng.expovariate(2.0) for _ in range(RUN + 1001)))
    cuts = statistics.quantiles(sorted(durations), n=100, method="inclusive")
    summary = latency_summary(durations)
    assert (summary["p50"], summary["p90"], summary["p99"]) == (cuts[49], cuts[89], cuts[98])
    assert summary["max"] == max(durations) and summary["count"] == len(durations)
