"""One ``/run`` attempt against a real server: the only place transport errors become classes."""

from __future__ import annotations

import pytest

from pytest_rollouts.dispatch.client import JSON_HEADERS, Attempt, post_run
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import Pool, Target

from ..agents import Reply, ScriptedAgent
from .raw_server import answering, server

TIMEOUT = 2.0
BODY = b'{"_ng_task_index": 0, "_ng_rollout_index": 0}'


async def attempt_on(url: str) -> Attempt:
    """One ``post_run`` on a pool of its own, closed after."""
    pool = Pool(TIMEOUT)
    try:
        return await post_run(pool, Target.of("POST", url, "/run", JSON_HEADERS), BODY, TIMEOUT, Redactor({}))
    finally:
        pool.close()


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
        attempt = await attempt_on(agent.url)
    if failure_class is None:
        assert attempt.failure is None and attempt.reply == reply.json
    else:
        assert attempt.reply is None and attempt.failure is not None
        assert (attempt.failure.failure_class, attempt.failure.retryable) == (failure_class, retryable)
        assert attempt.failure.http_status == (reply.status if not reply.reset and not reply.delay else None)


@pytest.mark.asyncio
async def test_error_body_is_kept_for_the_sidecar() -> None:
    with ScriptedAgent(lambda row, seen: Reply(status=503, raw=b"busy")) as agent:
        attempt = await attempt_on(agent.url)
    assert attempt.failure is not None and attempt.failure.body == "busy"


@pytest.mark.asyncio
async def test_a_redirect_is_not_followed_and_says_where_it_pointed() -> None:
    moved = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /run/\r\nContent-Length: 0\r\n\r\n"
    async with server(answering(moved)) as agent:
        attempt = await attempt_on(agent.url)
    assert attempt.failure is not None
    assert (attempt.failure.failure_class, attempt.failure.http_status) == ("agent_run_error", 307)
    assert "a redirect to /run/ (not followed" in attempt.failure.message
