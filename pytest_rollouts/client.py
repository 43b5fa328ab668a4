"""One ``POST {agent}/run`` attempt, and the only place transport errors become failure classes.

Classes follow NeMo Gym: a status the agent chose (500, 422, ...) or a 2xx body that
is not a JSON object means the rollout ran and broke (``agent_run_error``); a gateway
status (429/502/503/504) or no reply at all says nothing about the rollout
(``agent_request_failed``) and is the only kind worth retrying.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from .records import FAILURE_CLASS, MAX_BODY_CHARS

AGENT_RUN_ERROR = "agent_run_error"
AGENT_REQUEST_FAILED = "agent_request_failed"
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}


@dataclass(slots=True)
class Failure:
    """Why an attempt produced no score, in the sidecar's vocabulary."""

    failure_class: str
    type: str
    message: str
    http_status: int | None = None
    body: str | None = None
    retryable: bool = False
    retry_after: float | None = None

    def fields(self) -> dict[str, Any]:
        return {
            FAILURE_CLASS: self.failure_class,
            "_ng_failure_type": self.type,
            "_ng_failure_message": self.message,
            "_ng_failure_http_status": self.http_status,
            "_ng_failure_response_body": self.body,
            "_ng_failure_terminal": False,
        }


@dataclass(slots=True)
class Attempt:
    """A reply object (possibly one the agent classified as a failure), or a transport failure."""

    reply: dict[str, Any] | None
    failure: Failure | None
    elapsed: float
    http_status: int | None = None


async def post_run(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    timeout: aiohttp.ClientTimeout,
    headers: Mapping[str, str] = JSON_HEADERS,
) -> Attempt:
    """One attempt; ``headers`` must include the JSON content type (``JSON_HEADERS`` plus any agent headers)."""
    started = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers, timeout=timeout) as resp:
            status = resp.status
            if 200 <= status < 300:
                raw = await resp.read()
            else:
                raw = await resp.content.read(4 * MAX_BODY_CHARS)
                failure = _status_failure(status, raw, resp.headers.get("Retry-After"))
                return Attempt(None, failure, time.perf_counter() - started, status)
    except TimeoutError:
        failure = Failure(AGENT_REQUEST_FAILED, "TimeoutError", f"no reply from {url} within {timeout.total:g}s")
        return Attempt(None, failure, time.perf_counter() - started)
    except aiohttp.ClientError as exc:
        failure = Failure(AGENT_REQUEST_FAILED, type(exc).__name__, str(exc) or type(exc).__name__, retryable=True)
        return Attempt(None, failure, time.perf_counter() - started)
    elapsed = time.perf_counter() - started
    try:
        reply = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        reply = None
        reason = f"reply is not valid JSON ({exc})"
    else:
        reason = f"reply is a JSON {type(reply).__name__}, not an object"
    if not isinstance(reply, dict):
        failure = Failure(AGENT_RUN_ERROR, "InvalidReply", reason, status, _cut(raw))
        return Attempt(None, failure, elapsed, status)
    return Attempt(reply, None, elapsed, status)


def _status_failure(status: int, raw: bytes, retry_after: str | None) -> Failure:
    retryable = status in RETRYABLE_STATUSES
    return Failure(
        AGENT_REQUEST_FAILED if retryable else AGENT_RUN_ERROR,
        "HTTPStatus",
        f"agent answered HTTP {status}",
        status,
        _cut(raw),
        retryable=retryable,
        retry_after=_seconds(retry_after) if retryable else None,
    )


def _cut(raw: bytes) -> str:
    return raw[: 4 * MAX_BODY_CHARS].decode("utf-8", errors="replace")[:MAX_BODY_CHARS]


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
