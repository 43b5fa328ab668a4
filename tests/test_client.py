"""One ``/run`` attempt against a real server: the only place transport errors become classes."""

from __future__ import annotations

import aiohttp
import pytest

from pytest_rollouts.client import post_run

from .agents import Reply, ScriptedAgent

TIMEOUT = aiohttp.ClientTimeout(total=2.0)
BODY = b'{"_ng_task_index": 0, "_ng_rollout_index": 0}'


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("reply", "failure_class", "retryable"),
    [
        (Reply(json={"reward": 1.0}), None, False),
        (Reply(json={"_ng_failure_class": "skipped"}), None, False),
        (Reply(status=500), "agent_run_error", False),
        (Reply(status=429), "agent_request_failed", True),
        (Reply(status=504), "agent_request_failed", True),
        (Reply(raw=b"not json"), "agent_run_error", False),
        (Reply(reset=True), "agent_request_failed", True),
        (Reply(delay=5.0, json={}), "agent_request_failed", False),
    ],
)
async def test_post_run_classifies(reply: Reply, failure_class: str | None, retryable: bool) -> None:
    with ScriptedAgent(lambda row, seen: reply) as agent:
        async with aiohttp.ClientSession() as session:
            attempt = await post_run(session, agent.url + "/run", BODY, TIMEOUT)
    if failure_class is None:
        assert attempt.failure is None and attempt.reply == reply.json
    else:
        assert attempt.reply is None and attempt.failure is not None
        assert (attempt.failure.failure_class, attempt.failure.retryable) == (failure_class, retryable)
        assert attempt.failure.http_status == (reply.status if not reply.reset and not reply.delay else None)


@pytest.mark.asyncio
async def test_error_body_is_kept_for_the_sidecar() -> None:
    with ScriptedAgent(lambda row, seen: Reply(status=503, raw=b"busy")) as agent:
        async with aiohttp.ClientSession() as session:
            attempt = await post_run(session, agent.url + "/run", BODY, TIMEOUT)
    assert attempt.failure is not None and attempt.failure.body == "busy"
