"""OpenTelemetry spans of a run: ``job`` around it, as NeMo Gym names its run's span, and a
``rollout`` span for each rollout it sent, a child of ``job``.

The spans are made where each rollout's outcome arrives (the pytest process, the Python API's
caller), never in the dispatcher process: that process has no tracer provider of the user's, and
its loop stays as lean with tracing as without. A ``rollout`` span is made after the fact, from
its outcome: it starts when the rollout's recorded try was sent (``RolloutOutcome.started``) and
lasts that try's latency (``elapsed``), the latency the summary and the rows give.

Tracing is on when the process has a tracer provider: ``opentelemetry.trace`` is already imported
(by a conftest or script that set a provider, or by ``opentelemetry-instrument``) and its provider
is not the API's default no-op. Nothing is imported otherwise, so a run without a provider pays
one dictionary look-up, and a user who sets one gets the spans where their other spans go.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_rollouts.rows.records import RolloutOutcome

if TYPE_CHECKING:
    from pytest_rollouts.scoring.aggregate import RunScore

JOB = "job"
ROLLOUT = "rollout"
# Where this package's spans come from, as OpenTelemetry's instrumentation scope.
SCOPE = "pytest_rollouts"

AttributeValue = str | bool | int | float


class RunTrace:
    """One run's ``job`` span, and its ``rollout`` spans made as outcomes arrive."""

    def __init__(self, trace: Any, tracer: Any, job: Any) -> None:
        self._trace = trace
        self._tracer = tracer
        self.job = job
        self._parent = trace.set_span_in_context(job)

    @classmethod
    def start(cls, attributes: Mapping[str, AttributeValue]) -> RunTrace | None:
        """The run's ``job`` span started now, or None when this process traces nothing."""
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:
            return None
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
        tracer = provider.get_tracer(SCOPE)
        return cls(trace, tracer, tracer.start_span(JOB, attributes=dict(attributes)))

    def rollouts(self, task_index: int, agent: str, outcomes: Iterable[RolloutOutcome]) -> None:
        """A ``rollout`` span for each outcome this run sent; none for one settled from disk
        (resume) or never sent (drained by the dispatch budget)."""
        for outcome in outcomes:
            if outcome.cached or not outcome.attempts:
                continue
            start = int(outcome.started * 1e9)
            span = self._tracer.start_span(
                ROLLOUT,
                context=self._parent,
                start_time=start,
                attributes=rollout_attributes(task_index, agent, outcome),
            )
            if outcome.failure_class is not None:
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, outcome.failure_class))
            span.end(end_time=start + int(outcome.elapsed * 1e9))

    def scored(self, score: RunScore) -> None:
        """What the run's score says, on ``job``: the rollouts it expected, scored and failed, and
        the mean reward (none when no group has one)."""
        coverage = score.coverage
        self.job.set_attributes(
            {
                "rollouts.expected": coverage.expected,
                "rollouts.scored": coverage.scored,
                "rollouts.failed": coverage.failed,
            }
        )
        if score.mean_reward is not None:
            self.job.set_attribute("rollouts.mean_reward", score.mean_reward)

    def end(self) -> None:
        """End ``job``."""
        self.job.end()


def rollout_attributes(task_index: int, agent: str, outcome: RolloutOutcome) -> dict[str, AttributeValue]:
    """A ``rollout`` span's attributes: which rollout, where it ran, how it ended and how long it took.

    ``rollouts.status`` is ``scored``, ``masked``, ``no_reward`` or the failure class, so one
    attribute filters every outcome; ``rollouts.failure_class`` is set on failures only."""
    status = outcome.status or ("masked" if outcome.masked else "scored")
    attributes: dict[str, AttributeValue] = {
        "rollouts.task_index": task_index,
        "rollouts.rollout_index": outcome.rollout_index,
        "rollouts.agent": agent,
        "rollouts.status": status,
        "rollouts.latency_s": outcome.elapsed,
        "rollouts.tries": outcome.attempts,
    }
    if outcome.failure_class is not None:
        attributes["rollouts.failure_class"] = outcome.failure_class
    if outcome.reward is not None:
        attributes["rollouts.reward"] = outcome.reward
    return attributes
