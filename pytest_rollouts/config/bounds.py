"""The bounds of the settings' values, one place for the model and its messages."""

# Upper bounds rule out values a run cannot use, before anything is moved or sent: a count past
# them overflows the plan's 64-bit columns or a connection pool, a duration past them (or inf, or
# nan) is a timer that never fires, which scoring and the dispatcher cannot hold.
MAX_PARALLEL = 100_000
MAX_RESIDENT = 10_000_000
MAX_REPEATS = 1_000_000
MAX_ROWS = 2**53
MAX_ATTEMPTS = 1_000
MAX_SHARDS = 1_000_000
MAX_SECONDS = 30 * 24 * 3600.0
# A timeout or budget below a millisecond ends every rollout before its request is written.
MIN_SECONDS = 0.001
# One agent's ``GET /health`` (``dispatch/health.py``), and so what pytest waits for its dispatcher's answer.
HEALTH_CHECK_S = 10.0


class AdaptiveParallel(int):
    """``--rollouts-parallel auto:MAX``: at most MAX requests in flight, the dispatcher finding the
    limit below it that each agent can take (``dispatch/concurrency.py``).

    An ``int`` (MAX), so every bound sized by ``parallel`` (resident rollouts, a worker's share,
    xdist's queues) reads it as it reads a fixed one; only the dispatcher asks whether it adapts.
    """

    def __repr__(self) -> str:
        return f"auto:{int(self)}"

    __str__ = __repr__
