"""A group's metrics from its server's ``/aggregate_metrics``: one request at the end of the run.

The request body, every row of the group, is streamed from the files in (task, rollout) order
rather than built in memory; the reply is kept as the server sent it, with any header value
it echoes redacted.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_rollouts.net.address import Address
from pytest_rollouts.net.auth import Redactor
from pytest_rollouts.net.blocking import RequestError, request
from pytest_rollouts.rows.resume import key_of
from pytest_rollouts.rows.schema import CREATE_PARAMS
from pytest_rollouts.scoring.accounting import Key
from pytest_rollouts.scoring.metrics_shape import odd_values
from pytest_rollouts.store.jsonl import LineReader, dumps, object_from, parse_object

NOT_IMPLEMENTED = frozenset({404, 405})
# How much of a metrics server's error reply the metrics note shows.
SHOWN_ERROR_CHARS = 200
BODY_CHUNK_BYTES = 1 << 16


class MetricsServerError(RuntimeError):
    """A server that has ``/aggregate_metrics`` but failed to answer it."""


def server_metrics(
    url: str,
    headers: Mapping[str, str],
    out: Path,
    output_offsets: Mapping[Key, int],
    added: list[dict[str, Any]],
    timeout: float,
) -> dict[str, Any] | None:
    """POST the group's rows to its server; None when it has no such endpoint (404/405).
    ``MetricsServerError`` when it failed, or replied with metrics the run cannot read (``odd_values``).

    ``output_offsets``: where the group's rows sit in ``out``; ``added``: the zeros the scoring
    policies add to them. ``timeout`` bounds the whole request, reply included: a server that
    trickles its answer must not hold the session open.
    """
    address = Address.parse(url, "/aggregate_metrics")
    redact = Redactor({"": address.with_credentials(headers)})
    try:
        response = request(
            "POST",
            url,
            "/aggregate_metrics",
            {**headers, "Content-Type": "application/json"},
            _batches(_verify_responses(out, output_offsets, added)),
            timeout=timeout,
        )
    except RequestError as exc:  # refused, reset, too slow, or a reply that is not HTTP
        raise MetricsServerError(f"{address.shown} failed: {redact(str(exc))}") from None
    if response.status in NOT_IMPLEMENTED:
        return None
    if response.status != 200:
        shown = redact.excerpt(response.body, SHOWN_ERROR_CHARS)
        raise MetricsServerError(f"{address.shown} answered HTTP {response.status}: {shown!r}")
    try:
        # Written to the metrics file and shown: a server echoing its request headers must not leak them.
        metrics = redact.row(object_from(response.body))
    except ValueError as exc:
        raise MetricsServerError(f"{address.shown} replied with {redact(str(exc))}") from None
    odd = odd_values(metrics)
    if odd:  # what the summary, the report, the gates and the exports would read as numbers
        raise MetricsServerError(f"{address.shown} replied with an odd {'; '.join(odd)}")
    return metrics


def metric_input(row: dict[str, Any]) -> dict[str, Any]:
    """What ``/aggregate_metrics`` gets of a row: no request params, and of the response only its usage."""
    row.pop(CREATE_PARAMS, None)
    response = row.get("response")
    if isinstance(response, dict):
        row["response"] = {"usage": response["usage"]} if "usage" in response else {}
    return row


def _verify_responses(out: Path, output_offsets: Mapping[Key, int], added: list[dict[str, Any]]) -> Iterator[bytes]:
    """``{"verify_responses": [...]}`` with rows sorted by task then rollout, read from disk as sent.

    ``output_offsets`` iterates its keys in that order (a group's view of its scan does), and the
    added zeros are of keys without a row: the two are merged as they go, never a set and a sorted
    list of a million keys."""
    extra = {key_of(row): row for row in added}
    keys = heapq.merge(output_offsets, sorted(extra))
    yield b'{"verify_responses":['
    with LineReader() as reader:
        for position, key in enumerate(keys):
            row = extra.get(key)
            if row is None:
                row = metric_input(parse_object(reader.read(out, output_offsets[key]), out, 0))
            yield (b"," if position else b"") + dumps(row)
    yield b"]}"


def _batches(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """Pieces joined into chunks of about ``BODY_CHUNK_BYTES``: one send (and chunk header) each, not one per row."""
    batch: list[bytes] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= BODY_CHUNK_BYTES:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)
