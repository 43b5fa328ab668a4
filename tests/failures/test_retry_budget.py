"""One retry budget per run: an agent failing nine requests in ten gets a bounded number of retries,
every rollout still leaves one row, and a resume against the agent once healthy completes the run."""

from __future__ import annotations

import email.utils
import itertools
import math
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts.dispatch.retry_budget import FLOOR_PER_S, WINDOW_S

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, keys, one_rollout_dispatcher, read_rows, run_rollouts, tasks, write_rows

ROWS = 600
RETRIES = 5
FRACTION = 0.1


def nine_in_ten_fail() -> Any:
    count = itertools.count()

    def behaviour(row: dict[str, Any], seen: int) -> Reply:
        if next(count) % 10:
            return Reply(status=503, json={"detail": "overloaded"}, headers=(("Retry-After", "0"),))
        return verifier(row, seen)

    return behaviour


def test_retries_are_bounded_and_a_resume_completes_the_run(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(ROWS))
    options = ("--rollouts-retry-backoff=0", f"--rollouts-retry-budget={FRACTION}", "--rollouts-parallel=16")
    with ScriptedAgent(nine_in_ten_fail()) as agent:
        began = time.monotonic()
        first = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-retries={RETRIES}", *options
        )
        took = time.monotonic() - began
        requests = len(agent.requests)
        metrics = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
        agent.behaviour = verifier
        resumed = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
    # Each retry is spent from a window that also holds the first tries of the window before it.
    windows = math.ceil(took / WINDOW_S) + 1
    bound = ROWS + 2 * FRACTION * ROWS + (FLOOR_PER_S * WINDOW_S + 1) * windows
    # Without the budget: ROWS * (1 + 0.9 + ... + 0.9**RETRIES), about 2,800.
    assert requests <= bound < ROWS * (1 - 0.9 ** (RETRIES + 1)) / 0.1 / 2, (requests, bound)
    text = first.stdout.str()
    assert "retries refused" in text, text
    refused = int(text.split("retry budget: ")[1].split(" retries refused")[0])
    assert refused > 0
    (entry,) = metrics
    assert entry["dispatch"]["retries_refused_by_budget"] == refused
    assert requests == ROWS + entry["dispatch"]["retries"]
    # Nothing lost: the first run's rows were each rollout's once, and the resume completed every one.
    assert resumed.ret == 0, resumed.stdout.str()
    artifacts = Artifacts(pytester.path)
    assert sorted(keys(artifacts.rows)) == [(task, 0) for task in range(ROWS)]
    assert len(set(keys(artifacts.rows))) == ROWS
    refused_rows = [row for row in artifacts.failures if "retry budget is spent" in row.get("_ng_failure_message", "")]
    assert len(refused_rows) == refused
    assert all(row["_ng_failure_class"] == "agent_request_failed" for row in refused_rows)


def test_retry_after_as_an_http_date_is_waited_for(tmp_path: Path) -> None:
    """A 503 whose ``Retry-After`` is a date: the retry arrives no sooner than that date."""
    when = email.utils.formatdate(time.time() + 2, usegmt=True)
    arrivals: list[float] = []

    def once_busy(row: dict[str, Any], seen: int) -> Reply:
        arrivals.append(time.time())
        if not seen:
            return Reply(status=503, json={"detail": "later"}, headers=(("Retry-After", when),))
        return verifier(row, seen)

    row = orjson.dumps({"_ng_task_index": 0, "_ng_rollout_index": 0})
    with ScriptedAgent(once_busy) as agent:
        dispatcher = one_rollout_dispatcher(tmp_path, [row], agent.url, 1, retries=1, retry_backoff=0)
        dispatcher.start()
        try:
            (outcome,) = dispatcher.wait(0)
        finally:
            dispatcher.close()
    assert outcome.reward == 1.0 and len(arrivals) == 2
    assert arrivals[1] >= email.utils.parsedate_to_datetime(when).timestamp()
    assert len(read_rows(tmp_path / "r.jsonl")) == 1
