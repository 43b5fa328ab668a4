"""``run_examples``: rows a caller holds, run in its own event loop against real agents on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import inspect
import subprocess
import sys
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from pytest_rollouts import HealthCheckFailed, preprocess_examples, run_examples
from pytest_rollouts.config.settings import Settings

from ..agents import Reply, ScriptedAgent
from ..helpers import tasks


def stamped(n: int, agent: str = "policy") -> list[dict[str, Any]]:
    return preprocess_examples(tasks(n), agent_map={"_default": agent})


def by_task(behaviours: dict[int, Reply], default: Reply | None = None) -> Callable[[dict[str, Any], int], Reply]:
    """A behaviour answering each task as listed, others with ``default`` (a reply naming the task)."""

    def behave(row: dict[str, Any], seen: int) -> Reply:
        task = row["_ng_task_index"]
        return behaviours.get(task) or default or Reply(json={"reward": 1.0, "task": task, "seen": seen})

    return behave


async def collect(results: AsyncIterator[tuple[Any, dict[str, Any]]]) -> list[tuple[Any, dict[str, Any]]]:
    return [pair async for pair in results]


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition``, which the code under test must bring about (10 s at most)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"still not true after 10 s: {what}")


def others() -> set[asyncio.Task[Any]]:
    """Tasks of this loop besides the test's own."""
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


@pytest.mark.asyncio
async def test_results_are_exactly_the_replies_in_completion_order() -> None:
    replies = {0: Reply(delay=0.8, json={"reward": 0.0, "n": 0}), 1: Reply(delay=0.4, json={"reward": 0.5, "n": 1})}
    rows = stamped(3)
    with ScriptedAgent(by_task(replies, Reply(json={"reward": 1.0, "n": 2, "nested": {"x": [1, None]}}))) as agent:
        async with run_examples(rows, {"policy": agent.url}, parallel=3) as results:
            pairs = await collect(results)
    assert [row["_ng_task_index"] for row, _ in pairs] == [2, 1, 0]
    assert all(row is rows[row["_ng_task_index"]] for row, _ in pairs), "the caller's own rows come back"
    # The reply as the agent sent it: no stamp, no elapsed time, nothing of the collector's.
    assert [result for _, result in pairs] == [
        {"reward": 1.0, "n": 2, "nested": {"x": [1, None]}},
        {"reward": 0.5, "n": 1},
        {"reward": 0.0, "n": 0},
    ]
    assert agent.requests == rows, "rows are sent as given"


@pytest.mark.parametrize(
    ("reply", "failure_class", "failure_type", "status"),
    [
        (Reply(status=500, json={"detail": "boom"}), "agent_run_error", "HTTPStatus", 500),
        (Reply(reset=True), "agent_request_failed", "ServerDisconnectedError", None),
        (Reply(delay=30), "agent_request_failed", "TimeoutError", None),
        (
            Reply(json={"_ng_failure_class": "timeout_exceeded", "failure_reason": "ran out", "reward": 0.0}),
            "timeout_exceeded",
            "AgentReported",
            200,
        ),
    ],
    ids=["500", "reset", "timeout", "agent-classified"],
)
@pytest.mark.asyncio
async def test_a_failed_rollout_is_a_failure_row_and_the_others_go_on(
    reply: Reply, failure_class: str, failure_type: str, status: int | None
) -> None:
    with ScriptedAgent(by_task({1: reply})) as agent:
        async with run_examples(stamped(3), {"policy": agent.url}, retries=0, timeout=1.0) as results:
            pairs = {row["_ng_task_index"]: result for row, result in await collect(results)}
    assert pairs[0] == {"reward": 1.0, "task": 0, "seen": 0} and pairs[2] == {"reward": 1.0, "task": 2, "seen": 0}
    failed = pairs[1]
    assert "reward" not in failed or failure_class == "timeout_exceeded"  # only an agent's own row keeps its keys
    assert failed["_ng_failure_class"] == failure_class
    assert failed["_ng_failure_type"] == failure_type
    assert failed["_ng_failure_http_status"] == status
    assert failed["_ng_task_index"] == 1 and failed["_ng_rollout_index"] == 0
    assert failed["agent_ref"] == {"name": "policy"}
    assert failed["_ng_failure_terminal"] is False
    assert isinstance(failed["elapsed_seconds"], float)


@pytest.mark.asyncio
async def test_a_retried_rollout_yields_the_reply_that_came() -> None:
    def flaky(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=503, json={"busy": True}) if seen < 2 else Reply(json={"reward": 1.0, "try": seen})

    with ScriptedAgent(flaky) as agent:
        async with run_examples(stamped(1), {"policy": agent.url}, retries=2, retry_backoff=0.01) as results:
            [(_, result)] = await collect(results)
    assert result == {"reward": 1.0, "try": 2}
    assert len(agent.requests) == 3


@pytest.mark.asyncio
async def test_rollouts_the_budget_drains_are_cancelled_rows_and_are_not_sent() -> None:
    """A margin longer than the budget drains every rollout before its request."""
    with ScriptedAgent() as agent:
        async with run_examples(stamped(4), {"policy": agent.url}, dispatch_budget=5, drain_margin=10) as results:
            pairs = await collect(results)
    assert len(pairs) == 4
    for row, result in pairs:
        assert result["_ng_failure_class"] == "cancelled"
        assert result["_ng_dispatch_drained"] is True and result["_ng_no_persist"] is True
        assert result["_ng_task_index"] == row["_ng_task_index"]
        assert result["_ng_failure_message"].startswith("dispatch budget: ")
    assert agent.requests == []


@pytest.mark.asyncio
async def test_at_most_parallel_requests_are_in_flight() -> None:
    with ScriptedAgent(latency=0.1) as agent:
        async with run_examples(stamped(12), {"policy": agent.url}, parallel=3) as results:
            pairs = await collect(results)
    assert len(pairs) == 12
    assert agent.peak_in_flight == 3


@pytest.mark.asyncio
async def test_at_most_max_resident_rollouts_wait_for_the_caller() -> None:
    """A caller that stops taking results stops new starts: a slow consumer slows dispatch."""
    with ScriptedAgent() as agent:
        async with run_examples(stamped(10), {"policy": agent.url}, parallel=8, max_resident=3) as results:
            assert agent.requests == [], "nothing starts before the first result is asked for"
            first = await anext(results)
            # The one taken made room for one more: 3 resident, 4 started.
            await until(lambda: agent.completed == 4, "the resident rollouts are answered")
            await asyncio.sleep(0.2)  # room for any start over the bound to happen
            assert len(agent.requests) == 4
            rest = await collect(results)
    assert sorted(row["_ng_task_index"] for row, _ in [first, *rest]) == list(range(10))


class WeakRow(dict):  # type: ignore[type-arg]
    """A row a weak reference can follow (a plain dict cannot be one's target)."""


@pytest.mark.asyncio
async def test_a_row_handed_back_is_held_nowhere() -> None:
    """Memory is bounded by what is in flight, however many rows the caller streams: once a pair
    is taken and dropped, its row is gone; at most ``max_resident`` wait, and the one being read."""
    refs: list[weakref.ref[WeakRow]] = []

    def rows() -> Iterator[WeakRow]:
        for row in stamped(40):
            refs.append(weakref.ref(held := WeakRow(row)))
            yield held

    most = 0
    with ScriptedAgent() as agent:
        async with run_examples(rows(), {"policy": agent.url}, parallel=2, max_resident=4) as results:
            async for pair in results:
                del pair
                gc.collect()
                most = max(most, sum(ref() is not None for ref in refs))
    assert 0 < most <= 4 + 1


@pytest.mark.parametrize("how", ["break", "exception", "cancel"])
@pytest.mark.asyncio
async def test_leaving_early_cancels_everything_in_flight(how: str) -> None:
    with ScriptedAgent(by_task({0: Reply(json={"reward": 1.0})}, Reply(delay=30, json={}))) as agent:
        taken, leave = asyncio.Event(), asyncio.Event()

        async def consume() -> None:
            async with run_examples(stamped(6), {"policy": agent.url}, parallel=6) as results:
                async for _ in results:
                    taken.set()
                    await leave.wait()
                    if how == "break":
                        break
                    raise KeyError("the caller's own error")

        consumer = asyncio.create_task(consume())
        await taken.wait()
        await until(lambda: agent.in_flight == 5, "the slow rollouts are in flight")
        if how == "cancel":
            consumer.cancel()
        else:
            leave.set()
        expected = {"break": None, "exception": KeyError, "cancel": asyncio.CancelledError}[how]
        if expected is None:
            await consumer
        else:
            with pytest.raises(expected):
                await consumer
        assert others() == set(), "tasks left running"
        await until(lambda: agent.in_flight == 0, "the agent sees every connection closed")
        sent = len(agent.requests)
        await asyncio.sleep(0.2)
        assert len(agent.requests) == sent == 6, "a request after the block ended"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"parallel": 0}, "parallel: must be at least 1"),
        ({"max_resident": 0}, "max_resident: must be at least 1"),
        ({"timeout": 0}, "timeout: must be at least 0.001"),
        ({"retries": 21}, "retries: must be at most 20"),
        ({"retry_backoff": -1}, "retry_backoff: must be at least 0"),
        ({"dispatch_budget": float("inf")}, "dispatch_budget: must be a finite number"),
        ({"drain_margin": -1}, "drain_margin: must be at least 0"),
        ({"health_workers": 0}, "health_workers: must be at least 1"),
        ({"agent_header": ["no-equals-sign"]}, "agent_header: an agent header looks like NAME=VALUE"),
        ({"agents": {}}, "agents must map agent names to URLs"),
        ({"agents": {"a:b": "http://127.0.0.1:9"}}, "agents: 'a:b' is no agent name"),
        ({"agents": {"policy": "ftp://127.0.0.1:9"}}, "agents: agent address 'ftp://127.0.0.1:9' is not an http"),
    ],
)
def test_bad_arguments_are_value_errors_naming_the_argument(
    agent: ScriptedAgent, kwargs: dict[str, Any], words: str
) -> None:
    arguments = {"agents": {"policy": agent.url}, **kwargs}
    with pytest.raises(ValueError, match=words.replace("(", r"\(")) as raised:
        run_examples(stamped(2), **arguments)
    assert "agent_header" not in kwargs or "no-equals-sign" not in str(raised.value), "a header value is a secret"
    assert agent.requests == [] and agent.health_checks == 0


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        (tasks(2), "row 0 has no _ng_task_index and _ng_rollout_index"),
        ([*stamped(2), {**stamped(1)[0], "_ng_rollout_index": -1}], "row 2 has no _ng_task_index"),
        (stamped(2, agent="judge"), "row 0 names agent 'judge', which is not in agents (policy)"),
        ([{"_ng_task_index": 0, "_ng_rollout_index": 0}], "row 0 names no agent"),
        (["not a row"], "row 0 is a str, not a mapping"),
    ],
)
def test_bad_rows_are_value_errors_before_anything_is_sent(agent: ScriptedAgent, rows: list[Any], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        run_examples(rows, {"policy": agent.url})
    assert agent.requests == [] and agent.health_checks == 0


@pytest.mark.asyncio
async def test_rows_from_an_iterator_are_read_as_rollouts_start_and_a_bad_one_ends_the_stream(
    agent: ScriptedAgent,
) -> None:
    read: list[int] = []

    def rows() -> Iterator[dict[str, Any]]:
        for row in stamped(6):
            read.append(row["_ng_task_index"])
            yield row if row["_ng_task_index"] != 4 else {**row, "agent_ref": {"name": "judge"}}

    taken: list[int] = []
    with pytest.raises(ValueError, match="row 4 names agent 'judge'"):
        async with run_examples(rows(), {"policy": agent.url}, max_resident=2) as results:
            assert read == [], "rows are read as rollouts start"
            async for row, _ in results:
                taken.append(row["_ng_task_index"])
    assert others() == set()
    assert all(task < 4 for task in taken) and 4 not in agent.keys()


@pytest.mark.asyncio
async def test_an_unhealthy_agent_stops_the_block_before_anything_is_sent() -> None:
    with ScriptedAgent(health=Reply(status=503, json={"status": "starting"})) as agent:
        with pytest.raises(HealthCheckFailed) as failed:
            async with run_examples(stamped(2), {"policy": agent.url}):
                raise AssertionError("the block ran")
        assert failed.value.lines == [f'agent \'policy\' at {agent.url}: HTTP 503: {{"status":"starting"}}']
        assert agent.requests == [] and others() == set()
        async with run_examples(stamped(2), {"policy": agent.url}, no_health_check=True) as results:
            assert len(await collect(results)) == 2
        assert agent.health_checks == 1


@pytest.mark.asyncio
async def test_the_callers_loop_keeps_running_while_rollouts_stream() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    seen: list[int] = []
    with ScriptedAgent(by_task({1: Reply(delay=0.5, json={"reward": 1.0})})) as agent:
        async with run_examples(stamped(2), {"policy": agent.url}) as results:
            async for _ in results:
                seen.append(ticks)
    ticker.cancel()
    assert seen[1] > seen[0], "the caller's other coroutine made no progress while a rollout was in flight"


@pytest.mark.asyncio
async def test_episode_rows_go_to_their_environment_server_as_episodes() -> None:
    raw = [{"task_id": {"taskset": "ts", "id": 7}, "task_input": {"q": 1}}]
    rows = preprocess_examples(raw, agent_map={"ts": "env"})

    def server(request: dict[str, Any], seen: int) -> Reply:
        task = request["task"]
        return Reply(json={"episode_id": request["episode_id"], "task_id": task["task_id"], "result": {"reward": 1.0}})

    with ScriptedAgent(server) as env:
        async with run_examples(rows, {"env": env.url}) as results:
            [(_, result)] = await collect(results)
    assert env.requests == [
        {
            "episode_id": {"rollout_id": "0-0", "attempt": 0},
            "task": {"task_id": raw[0]["task_id"], "task_input": {"q": 1}},
        }
    ]
    assert result == {"reward": 1.0, "_ng_task_id": {"taskset": "ts", "id": 7}}


@pytest.mark.asyncio
async def test_legacy_routing_sends_flat_rows_to_the_environment_server_stamped() -> None:
    """Rows stamped by ``preprocess_examples`` in legacy mode, and rows sent with ``environment_server``:
    each to the server, stamped in the body, the result and the failure row, its agent_ref kept."""
    raw = [*tasks(2), {"task_id": {"taskset": "ts", "id": 7}, "task_input": {"q": 1}}]
    raw[1]["agent_ref"] = {"name": "math_agent"}
    stamped_rows = preprocess_examples(
        raw, agent_map={"ts": "env"}, environment_routing_mode="legacy", environment_server="legacy_env"
    )
    assert [r["_ng_environment_server"] for r in stamped_rows] == ["legacy_env", "legacy_env", "env"]
    assert [r.get("agent_ref") for r in stamped_rows] == [None, {"name": "math_agent"}, None]

    def server(request: dict[str, Any], seen: int) -> Reply:
        if "episode_id" in request:
            episode = {"episode_id": request["episode_id"], "task_id": request["task"]["task_id"]}
            return Reply(json={**episode, "result": {"reward": 1.0}})
        if request["_ng_task_index"] == 1:
            return Reply(status=400, json={"error": "no"})
        return Reply(json={"reward": 0.5})

    plain = preprocess_examples(tasks(1), agent_map={"_default": "policy"})
    with ScriptedAgent(server) as legacy, ScriptedAgent(server) as env, ScriptedAgent() as policy:
        agents = {"legacy_env": legacy.url, "env": env.url, "policy": policy.url}
        async with run_examples(stamped_rows, agents, retries=0) as results:
            pairs = {row["_ng_task_index"]: result for row, result in await collect(results)}
        async with run_examples(plain, agents, environment_server="legacy_env") as results:
            [(row, sent_result)] = await collect(results)
        assert policy.requests == [] and len(env.requests) == 1
        assert [r["_ng_environment_server"] for r in legacy.requests] == ["legacy_env"] * 3
        assert legacy.requests[2]["agent_ref"] == {"name": "policy"}
    assert pairs[0] == {"reward": 0.5}, "a reply is handed back exactly as it came"
    assert pairs[1]["_ng_failure_class"] == "agent_run_error"
    assert (pairs[1]["_ng_environment_server"], pairs[1]["agent_ref"]) == ("legacy_env", {"name": "math_agent"})
    assert "_ng_environment_server" not in row, "the caller's row is handed back as given"
    assert sent_result == {"reward": 0.5}


def test_legacy_routing_arguments_are_checked_as_the_options_are(agent: ScriptedAgent) -> None:
    with pytest.raises(ValueError, match="legacy sends every flat row to the server environment_server names"):
        preprocess_examples(tasks(1), environment_routing_mode="legacy")
    with pytest.raises(ValueError, match=r"row 0: a flat row .* under environment routing mode 'taskset'"):
        preprocess_examples(tasks(1), environment_routing_mode="taskset")
    with pytest.raises(ValueError, match="environment_server 'ghost' is not in agents"):
        run_examples(stamped(1), {"policy": agent.url}, environment_server="ghost")
    assert agent.requests == []


def test_runs_on_asyncio_and_on_uvloop(agent: ScriptedAgent) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> tuple[int, int]:
        async with run_examples(stamped(5), {"policy": agent.url}, parallel=2) as results:
            count = len(await collect(results))
        return count, len(others())

    assert asyncio.run(main()) == (5, 0)
    assert uvloop.run(main()) == (5, 0)
    assert len(agent.requests) == 10


def test_the_defaults_are_the_plugins() -> None:
    """One set of defaults: an option's default changed is the API's changed."""
    fields = Settings.model_fields
    for name, parameter in inspect.signature(run_examples).parameters.items():
        if name in ("rows", "agents"):
            continue
        default = fields[name].default
        assert parameter.default == (tuple(default) if isinstance(default, frozenset) else default), name


def test_using_run_examples_imports_neither_pytest_nor_aiohttp() -> None:
    code = (
        "import asyncio, sys\n"
        "import pytest_rollouts\n"
        "rows = [{'_ng_task_index': 0, '_ng_rollout_index': 0, 'agent_ref': {'name': 'a'}}]\n"
        "async def main():\n"
        "    run = pytest_rollouts.run_examples(rows, {'a': 'http://127.0.0.1:9'}, retries=0, no_health_check=True)\n"
        "    async with run as results:\n"
        "        return [r['_ng_failure_class'] async for _, r in results]\n"
        "print(asyncio.run(main()))\n"
        "print(sorted(m for m in ('pytest', '_pytest', 'aiohttp') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.split("\n")[:2] == ["['agent_request_failed']", "[]"], result.stdout + result.stderr
