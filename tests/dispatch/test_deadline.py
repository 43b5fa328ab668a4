"""A dispatch deadline: rollouts that cannot finish in time are not started, and resume runs them."""

from __future__ import annotations

import json

import pytest

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, keys, run_rollouts, tasks, write_rows


@pytest.mark.parametrize(
    "shape",
    [("--rollouts-parallel=2",), ("--rollouts-parallel=1", "--rollouts-repeats=3", "--rollouts-max-resident=1")],
    ids=["queued-behind-parallel", "repeats-admitted-together"],
)
def test_budget_drains_the_rest_and_resume_runs_it(pytester: pytest.Pytester, shape: tuple[str, ...]) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(20))
    budget, margin = 1.2, 0.3
    with ScriptedAgent(latency=0.2) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", *shape)
        first = run_rollouts(
            pytester, *common, f"--rollouts-dispatch-budget={budget}", f"--rollouts-drain-margin={margin}", "-rs"
        )
        outcomes = first.parseoutcomes()
        assert 0 < outcomes["passed"] < 20 and outcomes["passed"] + outcomes["skipped"] == 20
        first.stdout.fnmatch_lines(
            ["SKIPPED * data.jsonl: * rollouts not started, dispatch budget: *--rollouts-resume runs them"]
        )
        # Progress lines replace pytest's letters in a log: a skip's 's' ran into them ("ssssrollouts: ...").
        letters = [line for line in first.stdout.lines if line[:1] == "s" and line.lstrip("s")[:9] in ("", "rollouts:")]
        assert not letters
        # Admitted rollouts queue behind --rollouts-parallel (and an item's repeats are admitted
        # together): the budget must stop them when their request would go out. The clock starts
        # before the first request, so every request starts within budget - margin of the first.
        started = agent.arrivals[-1] - agent.arrivals[0]
        assert started <= budget, f"a request started {started:.2f}s after the first, past the {budget}s budget"
        artifacts = Artifacts(pytester.path)
        done = keys(artifacts.rows)
        [rate] = [line for line in first.stdout.lines if " rollouts ran in " in line]
        ran = int(rate.split()[0])
        assert ran == len(done), f"the rate counts rollouts that ran, not drained ones: {rate}"
        assert artifacts.failures == [], "drained rollouts are written nowhere"
        assert len(agent.requests) == len(done), "drained rollouts were never sent"
        drained = 20 * (3 if "--rollouts-repeats=3" in shape else 1) - len(done)
        # No pointer to the sidecar: a drained rollout is written nowhere.
        first.stdout.fnmatch_lines([f"Rollouts missing from the score: * (cancelled {drained} routed this run)"])
        [metrics] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
        assert metrics["coverage"]["missing_by_class"] == {"cancelled": drained}
        # The resume may go wider: what it must run is the same, whatever its window.
        second = run_rollouts(
            pytester, *common, "--rollouts-resume", "--rollouts-parallel=20", "--rollouts-max-resident=60"
        )
        second.assert_outcomes(passed=20)
        repeats = 3 if "--rollouts-repeats=3" in shape else 1
        final = keys(Artifacts(pytester.path).rows)
        assert sorted(final) == [(t, r) for t in range(20) for r in range(repeats)], "each rollout once"


def test_budget_refuses_a_retry_that_would_start_too_late(pytester: pytest.Pytester) -> None:
    """A retry is a new request: after the budget it is not sent, and the failure it would
    have retried stands (its sidecar row makes the next resume retry it). The first attempt
    goes out within the 1 s budget; the retry's backoff is 1.5-3 s."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    with ScriptedAgent(lambda row, seen: Reply(status=502) if seen == 0 else verifier(row, seen)) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}")
        first = run_rollouts(
            pytester, *common, "--rollouts-dispatch-budget=1.0", "--rollouts-retry-backoff=3.0", "--rollouts-retries=2"
        )
        assert first.parseoutcomes() == {"agent_request_failed": 1}
        first.stdout.fnmatch_lines(["*agent_request_failed*; not retried, dispatch budget: *"])
        assert len(agent.requests) == 1
        assert [f["_ng_failure_class"] for f in Artifacts(pytester.path).failures] == ["agent_request_failed"]
        second = run_rollouts(pytester, *common, "--rollouts-resume")
        second.assert_outcomes(passed=1)
        assert [r.get("_ng_attempt_index") for r in agent.requests] == [None, 1]


def test_drain_margin_defaults_to_p75_once_five_finished() -> None:
    from pytest_rollouts.dispatch.attempts import Deadline

    deadline = Deadline(budget=1000.0, margin=None)
    deadline.durations.extend([1.0, 2.0, 3.0, 4.0])
    assert deadline.margin() == 0.0, "too few durations to trust"
    deadline.durations.append(5.0)
    assert deadline.margin() == 4.0
    assert deadline.refuse() == ""
    assert Deadline(budget=1000.0, margin=7.0).margin() == 7.0
    assert Deadline(budget=0.5, margin=1.0).refuse().startswith("dispatch budget: ")


def test_a_margin_without_a_budget_is_pointed_out(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """It was silently ignored: a budget the user meant to set is missing."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    args = ["-W", "error", f"--rollouts-agent={agent.url}", "--rollouts-drain-margin=1"]
    result = run_rollouts(pytester, "data.jsonl", *args)
    result.assert_outcomes(passed=2)  # a plain line: a warning was an INTERNALERROR under -W error
    result.stdout.fnmatch_lines(["rollouts: --rollouts-drain-margin has no effect without --rollouts-dispatch-budget"])
