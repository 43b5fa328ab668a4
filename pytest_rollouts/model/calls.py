"""One model call, tried again after a 429, a 5xx, no reply or a timeout, and what ends it unanswered.

The model's own HTTP client is the dispatcher's (``net.http1``): kept-alive connections per
endpoint, as many as calls in flight and no hidden cap (aiohttp's connector caps at 100 by
default, which silently bounded runs at 100 whatever their parallelism). Calls in flight are
bounded by the semaphore the caller passes, ``--rollouts-model-parallel``.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.model.spec import CHAT, ModelPlan
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.http1 import LENGTH_FIELD, HttpError, Pool, Reply, Target
from pytest_rollouts.net.retry import backoff_delay, retry_after_seconds
from pytest_rollouts.rows.schema import AGENT_REQUEST_FAILED, AGENT_RUN_ERROR, MAX_BODY_CHARS
from pytest_rollouts.store.jsonl import dumps, loads

# The header that tells a seeded model which rollout asks, ``<task>.<rollout>``: real servers ignore it.
ROLLOUT_HEADER = b"X-Rollouts-Rollout: "


class ModelCallError(Exception):
    """A call that got no usable reply. ``failure_class`` says whether the rollout ran and broke
    (``agent_run_error``: the model refused the request) or never ran properly (``agent_request_failed``:
    the model was unavailable through every retry)."""

    def __init__(
        self, failure_class: str, kind: str, message: str, status: int | None = None, body: str | None = None
    ) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.kind = kind
        self.status = status
        self.body = body
        self.retry_after: float | None = None


@datatype(frozen=True, slots=True)
class CallBounds:
    """A call's timeout and its retries (``--rollouts-retries``, ``--rollouts-retry-backoff``)."""

    timeout: float
    retries: int
    backoff: float


class ModelClient:
    """Calls to one model agent's endpoint, with its headers, bounded by ``in_flight``."""

    def __init__(
        self,
        plan: ModelPlan,
        pool: Pool,
        headers: dict[str, str],
        bounds: CallBounds,
        in_flight: asyncio.Semaphore,
        redact: Redactor,
    ) -> None:
        route = "/chat/completions" if plan.api == CHAT else "/responses"
        target = Target.of("POST", plan.base_url, route, {"Content-Type": "application/json", **headers})
        self._target = target
        self._head = target.head.removesuffix(LENGTH_FIELD)
        self._pool = pool
        self._bounds = bounds
        self._in_flight = in_flight
        self._redact = redact
        self.url = target.url

    async def create(self, body: dict[str, Any], rollout: str) -> dict[str, Any]:
        """The model's reply to ``body`` as a JSON object; ``ModelCallError`` once no try got one."""
        data = dumps(body)
        target = replace(
            self._target, head=b"".join((self._head, ROLLOUT_HEADER, rollout.encode(), b"\r\n", LENGTH_FIELD))
        )
        tries = self._bounds.retries + 1
        for number in range(tries):
            try:
                return await self._once(target, data)
            except ModelCallError as exc:
                if exc.failure_class != AGENT_REQUEST_FAILED or number + 1 == tries:
                    if exc.failure_class == AGENT_REQUEST_FAILED:
                        exc.args = (f"{exc.args[0]} (after {tries} tries)",)
                    raise
                retry_after = exc.retry_after
            await asyncio.sleep(backoff_delay(self._bounds.backoff, number, retry_after))
        raise AssertionError("unreachable: the last try raises or returns")

    async def _once(self, target: Target, data: bytes) -> dict[str, Any]:
        timeout = self._bounds.timeout
        try:
            async with self._in_flight, asyncio.timeout(timeout):
                reply = await self._pool.request(target, data, error_limit=self._redact.keep(MAX_BODY_CHARS))
        except TimeoutError:
            raise ModelCallError(
                AGENT_REQUEST_FAILED, "ModelTimeout", f"no reply from the model at {self.url} within {timeout:g}s"
            ) from None
        except HttpError as exc:
            raise ModelCallError(AGENT_REQUEST_FAILED, exc.kind, f"the model at {self.url}: {exc}") from None
        if 200 <= reply.status < 300:
            return self._parsed(reply)
        error = ModelCallError(
            AGENT_REQUEST_FAILED if _unavailable(reply.status) else AGENT_RUN_ERROR,
            "ModelHTTPStatus",
            f"the model at {self.url} answered HTTP {reply.status}",
            reply.status,
            self._redact.excerpt(reply.body, MAX_BODY_CHARS),
        )
        error.retry_after = retry_after_seconds(reply.header(b"retry-after"))
        raise error

    def _parsed(self, reply: Reply) -> dict[str, Any]:
        try:
            parsed = loads(reply.body)
        except ValueError as exc:
            reason = f"is not valid JSON ({exc})"
        else:
            if isinstance(parsed, dict):
                return parsed
            reason = f"is a JSON {type(parsed).__name__}, not an object"
        raise ModelCallError(
            AGENT_RUN_ERROR,
            "InvalidModelReply",
            f"the model at {self.url} answered HTTP {reply.status}, but its reply {reason}",
            reply.status,
            self._redact.excerpt(reply.body, MAX_BODY_CHARS),
        )


def _unavailable(status: int) -> bool:
    """Statuses that say the model could not answer now (rate limit, overload, a gateway), not that
    the request was wrong: worth another try, and no verdict on the rollout."""
    return status == 429 or status >= 500
