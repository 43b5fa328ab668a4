"""One ``POST {agent}/run`` attempt, and the only place transport errors become failure classes.

Classes follow NeMo Gym: a status the agent chose (500, 422, ...) or a 2xx body that
is not a JSON object means the rollout ran and broke (``agent_run_error``); a gateway
status (429/502/503/504) or no reply at all says nothing about the rollout
(``agent_request_failed``) and is the only kind worth retrying.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.dispatch.request_timeouts import RequestTimeouts
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import HttpError, Pool, Reply, Target
from pytest_rollouts.net.retry import retry_after_seconds
from pytest_rollouts.rows.records import Failure
from pytest_rollouts.rows.schema import AGENT_REQUEST_FAILED, AGENT_RUN_ERROR, MAX_BODY_CHARS
from pytest_rollouts.store.jsonl import loads

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}


@datatype(slots=True)
class Attempt:
    """A reply object (possibly one the agent classified as a failure), or a transport failure."""

    reply: dict[str, Any] | None
    failure: Failure | None
    elapsed: float
    http_status: int | None = None
    # When it was sent (``time.monotonic()``), set by ``attempts.py``: where its span starts.
    sent: float = 0.0


async def post_run(pool: Pool, target: Target, body: bytes, timeouts: RequestTimeouts, redact: Redactor) -> Attempt:
    """One attempt of at most ``timeouts.seconds``, connecting included.

    A failure's body is kept in part, cut to the sidecar's size by ``redact``, which redacts it first."""
    started = time.perf_counter()
    task = timeouts.begin()
    try:
        reply = await pool.request(target, body, error_limit=redact.keep(MAX_BODY_CHARS))
    except asyncio.CancelledError:
        if not timeouts.end(task):
            raise
        message = f"no reply from {target.url} within {timeouts.seconds:g}s"
        return Attempt(None, Failure(AGENT_REQUEST_FAILED, "TimeoutError", message), time.perf_counter() - started)
    except HttpError as exc:
        failure = Failure(AGENT_REQUEST_FAILED, exc.kind, str(exc) or exc.kind, retryable=True)
        return Attempt(None, failure, time.perf_counter() - started)
    finally:
        timeouts.end(task)  # again after a timeout, when it does nothing
    elapsed = time.perf_counter() - started
    status, raw = reply.status, reply.body
    if not 200 <= status < 300:
        return Attempt(None, _status_failure(reply, redact), elapsed, status)
    try:
        parsed = loads(raw)
    except ValueError as exc:
        parsed = None
        reason = f"reply is not valid JSON ({exc})"
    else:
        reason = f"reply is a JSON {type(parsed).__name__}, not an object"
    if not isinstance(parsed, dict):
        failure = Failure(AGENT_RUN_ERROR, "InvalidReply", reason, status, redact.excerpt(raw, MAX_BODY_CHARS))
        return Attempt(None, failure, elapsed, status)
    return Attempt(parsed, None, elapsed, status)


def _status_failure(reply: Reply, redact: Redactor) -> Failure:
    status, retryable = reply.status, reply.status in RETRYABLE_STATUSES
    message = f"agent answered HTTP {status}"
    location = reply.header(b"location")
    if 300 <= status < 400 and location:  # an agent's /run never moves; the address must be off
        message += f", a redirect to {location} (not followed: check the agent's address)"
    return Failure(
        AGENT_REQUEST_FAILED if retryable else AGENT_RUN_ERROR,
        "HTTPStatus",
        message,
        status,
        redact.excerpt(reply.body, MAX_BODY_CHARS),
        retryable=retryable,
        retry_after=retry_after_seconds(reply.header(b"retry-after")) if retryable else None,
    )
