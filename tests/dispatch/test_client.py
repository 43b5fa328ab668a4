"""One ``/run`` attempt against a real server: the only place transport errors become classes."""

from __future__ import annotations

import asyncio

import pytest

from pytest_rollouts.dispatch.client import JSON_HEADERS, Attempt, post_run
from pytest_rollouts.dispatch.request_timeouts import RequestTimeouts
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import Pool, Target

from ..agents import Reply, ScriptedAgent
from .raw_server import answering, server

TIMEOUT = 2.0
# The attempt's limit where no reply comes: a tenth of the server's delay, so it cannot be reached.
SILENT_TIMEOUT = 0.5
BODY = b'{"_ng_task_index": 0, "_ng_rollout_index": 0}'


async def attempt_on(url: str, timeout: float = TIMEOUT) -> Attempt:
    """One ``post_run`` on a pool of its own, closed after: its sockets too, before the server stops
    (which blocks this loop, and would wait for a handler still sleeping on an open connection)."""
    pool = Pool(timeout)
    try:
        return await post_run(
            pool, Target.of("POST", url, "/run", JSON_HEADERS), BODY, RequestTimeouts(timeout), Redactor({})
        )
    finally:
        pool.close()
        await asyncio.sleep(0)


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
        attempt = await attempt_on(agent.url, SILENT_TIMEOUT if reply.delay else TIMEOUT)
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
