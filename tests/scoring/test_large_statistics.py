"""A median and a spread over more values than one run (``stats.RUN``) agree with the stdlib's."""

from __future__ import annotations

import math
import random
import statistics
from array import array

import pytest

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
