"""A group's metrics from its server's ``/aggregate_metrics``: one request at the end of the run.

The request body, every row of the group, is streamed from the files in (task, rollout) order
rather than built in memory (``rows/metric_body.py``); the reply is kept as the server sent it,
with any header value it echoes redacted. A pytest session has its dispatcher process send it
(``MetricsPost``), which has the HTTP client loaded; elsewhere it is sent from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_rollouts.net.address import Address
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.blocking import RequestError, request
from pytest_rollouts.rows.metric_body import ROUTE, MetricsRequest
from pytest_rollouts.scoring.metrics_shape import odd_values
from pytest_rollouts.store.jsonl import dumps, object_from

NOT_IMPLEMENTED = frozenset({404, 405})
# How much of a metrics server's error reply the metrics note shows.
SHOWN_ERROR_CHARS = 200


class MetricsServerError(RuntimeError):
    """A server that has ``/aggregate_metrics`` but failed to answer it."""


# Sends one group's request: its reply's status and body; ``RequestError`` without one.
MetricsPost = Callable[[MetricsRequest], tuple[int, bytes]]


def post_here(metrics: MetricsRequest) -> tuple[int, bytes]:
    """``MetricsPost`` from this process, on a private event loop (``net/blocking.py``)."""
    reply = request("POST", metrics.url, *metrics.parts(), timeout=metrics.timeout)
    return reply.status, reply.body


def server_metrics(
    url: str,
    headers: Mapping[str, str],
    out: Path,
    order: Iterable[int],
    added: list[dict[str, Any]],
    timeout: float,
    post: MetricsPost | None = None,
) -> dict[str, Any] | None:
    """POST the group's rows to its server; None when it has no such endpoint (404/405).
    ``MetricsServerError`` when it failed, or replied with metrics the run cannot read (``odd_values``).

    ``order`` and ``added``: the group's rows as ``GroupRows.metric_order`` gives them (where each
    sits in ``out``, and the zeros the scoring policies add). ``timeout`` bounds the whole request,
    reply included: a server that trickles its answer must not hold the session open. ``post``
    sends it (by default: ``post_here``).
    """
    address = Address.parse(url, ROUTE)
    redact = Redactor({"": address.with_credentials(headers)})
    try:
        status, body = (post or post_here)(MetricsRequest(url, headers, out, order, list(map(dumps, added)), timeout))
    except RequestError as exc:  # refused, reset, too slow, or a reply that is not HTTP
        raise MetricsServerError(f"{address.shown} failed: {redact(str(exc))}") from None
    if status in NOT_IMPLEMENTED:
        return None
    if status != 200:
        shown = redact.excerpt(body, SHOWN_ERROR_CHARS)
        raise MetricsServerError(f"{address.shown} answered HTTP {status}: {shown!r}")
    try:
        # Written to the metrics file and shown: a server echoing its request headers must not leak them.
        metrics = redact.row(object_from(body))
    except ValueError as exc:
        raise MetricsServerError(f"{address.shown} replied with {redact(str(exc))}") from None
    odd = odd_values(metrics)
    if odd:  # what the summary, the report, the gates and the exports would read as numbers
        raise MetricsServerError(f"{address.shown} replied with an odd {'; '.join(odd)}")
    return metrics
